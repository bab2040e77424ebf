/**
 * The fake world the workflow suites run in: a real Temporal dev server and today's workflow
 * bundle for the suite (useFakeWorld), and, per test, the fake activities of workflowFakes.ts
 * served on Ratchet's task queues (withFakeWorkers). One place, so a new task queue or worker
 * option reaches every suite at once.
 */
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker, bundleWorkflowCode, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { TEMPORAL_BIN, TEMPORAL_DEV_ARGS } from '../helpers/stack';
import { SA } from '../../src/workflows/messages';
import { TASK_QUEUES } from '../../src/shared/paths';
import { makeFakes, type FakeOptions } from './workflowFakes';

/** The bundler's logger: warnings and errors only. */
export const quietLogger = {
  log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined,
  warn: (m: string) => console.warn(m), error: (m: string) => console.error(m),
};

export interface FakeWorld {
  env: TestWorkflowEnvironment;
  bundle: WorkflowBundleWithSourceMap;
}

/** Starts a dev server (the stack's dynamic config) and bundles src/workflows before the suite; tears down after. */
export function useFakeWorld(setupTimeoutMs = 240_000): FakeWorld {
  const world = {} as FakeWorld;
  beforeAll(async () => {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    world.env = await TestWorkflowEnvironment.createLocal({
      server: { executable: { type: 'existing-path', path: TEMPORAL_BIN }, ip: '127.0.0.1', searchAttributes: Object.values(SA), extraArgs: TEMPORAL_DEV_ARGS },
    });
    world.bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../../src/workflows'), logger: quietLogger });
  }, setupTimeoutMs);
  afterAll(async () => {
    await world.env?.teardown();
  });
  return world;
}

export interface FakeWorkerOptions {
  /** Trainer workers by id (task queue `trainer-<id>`); default one, w1. */
  trainers?: string[];
  /** Whether a rollout worker serves the rollout queue (an SftRun has no rollouts); default true. */
  rollouts?: boolean;
}

/** Runs `fn` while the main, rollout, trainer-announce and trainer workers serve `fakes`; shuts them down after. */
export async function withFakeWorkers<T>(
  world: FakeWorld, fakes: ReturnType<typeof makeFakes>, opts: FakeWorkerOptions, fn: (fakes: ReturnType<typeof makeFakes>) => Promise<T>,
): Promise<T> {
  const conn = world.env.nativeConnection;
  const workers = await Promise.all([
    Worker.create({ connection: conn, taskQueue: TASK_QUEUES.main, workflowBundle: world.bundle, activities: fakes.main }),
    ...(opts.rollouts === false ? [] : [Worker.create({ connection: conn, taskQueue: TASK_QUEUES.rollout, activities: fakes.rollout })]),
    Worker.create({ connection: conn, taskQueue: TASK_QUEUES.trainerAnnounce, activities: fakes.announce }),
    ...(opts.trainers ?? ['w1']).map((w) => Worker.create({ connection: conn, taskQueue: `trainer-${w}`, activities: fakes.trainerFor(w), shutdownGraceTime: '1 second' })),
  ]);
  const running = Promise.all(workers.map((w) => w.run()));
  try {
    return await fn(fakes);
  } finally {
    for (const w of workers) w.shutdown();
    await running;
  }
}

export { makeFakes, type FakeOptions };
