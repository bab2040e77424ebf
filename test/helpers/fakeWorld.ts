/**
 * The fake world every workflow suite runs in: a real Temporal dev server started the way the
 * stack starts it, with the workflow bundle built once for all suites (useFakeWorld), and, per
 * test, the fake activities of workflowFakes.ts served on Ratchet's task queues
 * (withFakeWorkers). One place, so a new task queue or worker option reaches every suite at once.
 */
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker, type WorkflowBundle } from '@temporalio/worker';
import { TEMPORAL_BIN, TEMPORAL_DEV_ARGS } from './stack';
import { workflowBundle } from './workflowBundle';
import { SA } from '../../src/workflows/messages';
import { TASK_QUEUES } from '../../src/shared/paths';
import { makeFakes, type FakeOptions } from './workflowFakes';

export { quietLogger, workflowBundle } from './workflowBundle';

export interface FakeWorld {
  env: TestWorkflowEnvironment;
  /** The bundle of `workflowsPath` (default src/workflows). */
  bundle: WorkflowBundle;
}

export interface FakeWorldOptions {
  /** The workflows the main worker runs; default src/workflows. */
  workflowsPath?: string;
  /** Namespaces besides default that the dev server creates. */
  namespaces?: string[];
  setupTimeoutMs?: number;
}

/** Starts a dev server (the stack's dynamic config and search attributes) and loads the shared bundle before the suite; tears down after. */
export function useFakeWorld(opts: FakeWorldOptions = {}): FakeWorld {
  const world = {} as FakeWorld;
  beforeAll(async () => {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    [world.env, world.bundle] = await Promise.all([
      TestWorkflowEnvironment.createLocal({
        server: {
          executable: { type: 'existing-path', path: TEMPORAL_BIN }, ip: '127.0.0.1', searchAttributes: Object.values(SA),
          extraArgs: [...TEMPORAL_DEV_ARGS, ...(opts.namespaces ?? []).flatMap((n) => ['--namespace', n])],
        },
      }),
      workflowBundle(opts.workflowsPath),
    ]);
  }, opts.setupTimeoutMs ?? 240_000);
  afterAll(async () => {
    await world.env?.teardown();
  });
  return world;
}

export interface FakeWorkerOptions {
  /** Trainer workers by id (task queue `trainer-<id>`); default one, w1. */
  trainers?: string[];
  /** Whether a rollout worker serves the rollout queue from the start (an SftRun has no rollouts; a test may start one later); default true. */
  rollouts?: boolean;
  /** Activity slots of the main and the rollout worker (the SDK's default when unset). */
  mainSlots?: number;
  rolloutSlots?: number;
  /** Inference host queues, each served by the fakes' inferenceHost activities. */
  hostQueues?: string[];
}

export interface FakeStack {
  fakes: ReturnType<typeof makeFakes>;
  /** Starts the rollout worker (for a test that began with `rollouts: false`). */
  startRolloutWorker: () => void;
}

/** Runs `fn` while the main, rollout, trainer-announce and trainer workers serve `fakes`; shuts them down after. */
export async function withFakeWorkers<T>(
  world: FakeWorld, fakes: ReturnType<typeof makeFakes>, opts: FakeWorkerOptions, fn: (fakes: ReturnType<typeof makeFakes>, stack: FakeStack) => Promise<T>,
): Promise<T> {
  const conn = world.env.nativeConnection;
  const workers = await Promise.all([
    Worker.create({ connection: conn, taskQueue: TASK_QUEUES.main, workflowBundle: world.bundle, activities: fakes.main, maxConcurrentActivityTaskExecutions: opts.mainSlots }),
    Worker.create({ connection: conn, taskQueue: TASK_QUEUES.trainerAnnounce, activities: fakes.announce }),
    ...(opts.trainers ?? ['w1']).map((w) => Worker.create({ connection: conn, taskQueue: `trainer-${w}`, activities: fakes.trainerFor(w), shutdownGraceTime: '1 second' })),
    ...(opts.hostQueues ?? []).map((q) => Worker.create({ connection: conn, taskQueue: q, activities: fakes.inferenceHost(q) })),
  ]);
  const running = workers.map((w) => w.run());
  const late: Promise<Worker>[] = [];
  const startRolloutWorker = () => {
    const created = Worker.create({ connection: conn, taskQueue: TASK_QUEUES.rollout, activities: fakes.rollout, maxConcurrentActivityTaskExecutions: opts.rolloutSlots });
    late.push(created);
    running.push(created.then((w) => w.run()));
  };
  if (opts.rollouts !== false) startRolloutWorker();
  try {
    return await fn(fakes, { fakes, startRolloutWorker });
  } finally {
    // A rollout worker started late may still be connecting: it joins the shutdown once created.
    for (const r of await Promise.allSettled(late)) if (r.status === 'fulfilled') workers.push(r.value);
    for (const w of workers) w.shutdown();
    await Promise.all(running);
  }
}

export { makeFakes, type FakeOptions };
