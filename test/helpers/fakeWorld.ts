/**
 * The fake world every workflow suite runs in: a real Temporal dev server started the way the
 * stack starts it, with the workflow bundle built once for all suites (useFakeWorld), and, per
 * test, the fake activities of workflowFakes.ts served on Ratchet's task queues
 * (withFakeWorkers). One place, so a new task queue or worker option reaches every suite at once.
 *
 * A suite whose tests mostly wait (timers, heartbeats, round trips to the server) runs them at
 * once with test.concurrent, each in a namespace of its own on the one server (inNamespace), so
 * their task queues, workflow ids and workers never meet.
 */
import { Client } from '@temporalio/client';
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
  /**
   * Starts the server and loads the bundle, once; the suite's beforeAll awaits it. A test.concurrent
   * body starts before a describe's beforeAll (jest-circus runs only the root's hooks first), so
   * inNamespace awaits it too.
   */
  ready: () => Promise<void>;
  /** Takes a free test namespace, waiting for one; give it back with releaseNamespace. */
  takeNamespace: () => Promise<string>;
  releaseNamespace: (name: string) => void;
}

export interface FakeWorldOptions {
  /** The workflows the main worker runs; default src/workflows. */
  workflowsPath?: string;
  /** Namespaces besides default that the dev server creates. */
  namespaces?: string[];
  /**
   * Tests that may run at once (inNamespace): namespaces test-1..test-N, created with the server (a
   * namespace made later has no search attributes). jest runs at most 5 concurrent tests by default.
   */
  concurrent?: number;
  setupTimeoutMs?: number;
}

/** A test's own namespace on the world's server, and a client of it. */
export interface TestNamespace {
  name: string;
  client: Client;
}

/** Starts a dev server (the stack's dynamic config and search attributes) and loads the shared bundle before the suite; tears down after. */
export function useFakeWorld(opts: FakeWorldOptions = {}): FakeWorld {
  const own = Array.from({ length: opts.concurrent ?? 0 }, (_, i) => `test-${i + 1}`);
  // Handed out oldest first: while there are more namespaces than tests, each test gets a fresh one.
  const free = [...own];
  const waiting: ((name: string) => void)[] = [];
  let started: Promise<void> | undefined;
  const start = async () => {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    [world.env, world.bundle] = await Promise.all([
      TestWorkflowEnvironment.createLocal({
        server: {
          executable: { type: 'existing-path', path: TEMPORAL_BIN }, ip: '127.0.0.1', searchAttributes: Object.values(SA),
          extraArgs: [...TEMPORAL_DEV_ARGS, ...[...(opts.namespaces ?? []), ...own].flatMap((n) => ['--namespace', n])],
        },
      }),
      workflowBundle(opts.workflowsPath),
    ]);
  };
  const world: FakeWorld = {
    env: undefined as unknown as TestWorkflowEnvironment,
    bundle: undefined as unknown as WorkflowBundle,
    ready: () => (started ??= start()),
    takeNamespace: () => {
      if (own.length === 0) throw new Error('inNamespace needs test namespaces. Fix: useFakeWorld({ concurrent: N })');
      return free.length ? Promise.resolve(free.shift()!) : new Promise((resolve) => waiting.push(resolve));
    },
    releaseNamespace: (name) => {
      const next = waiting.shift();
      if (next) next(name);
      else free.push(name);
    },
  };
  beforeAll(() => world.ready(), opts.setupTimeoutMs ?? 240_000);
  afterAll(async () => {
    await world.env?.teardown();
  });
  return world;
}

/** Runs `fn` in a namespace no other running test uses, waiting for a free one. */
export async function inNamespace<T>(world: FakeWorld, fn: (ns: TestNamespace) => Promise<T>): Promise<T> {
  await world.ready();
  const name = await world.takeNamespace();
  try {
    return await fn({ name, client: new Client({ connection: world.env.connection, namespace: name }) });
  } finally {
    world.releaseNamespace(name);
  }
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
  /** The test namespace the workers serve (inNamespace); default the default namespace. */
  namespace?: TestNamespace;
}

export interface FakeStack {
  fakes: ReturnType<typeof makeFakes>;
  /** A client of the workers' namespace. */
  client: Client;
  /** Starts the rollout worker (for a test that began with `rollouts: false`). */
  startRolloutWorker: () => void;
}

/**
 * Workflows run in the test's own thread (the SDK's debugMode, as its Replayer runs them), in the same
 * reusable V8 context: a worker thread of their own would load the SDK and the bundle again for every
 * test's worker, ~2 CPU-s each. The deadlock check stays: debugMode alone would lift its 5 s limit.
 */
const IN_THREAD = { debugMode: true, isolateExecutionTimeout: '5s' } as const;

/** Runs `fn` while the main, rollout, trainer-announce and trainer workers serve `fakes`; shuts them down after. */
export async function withFakeWorkers<T>(
  world: FakeWorld, fakes: ReturnType<typeof makeFakes>, opts: FakeWorkerOptions, fn: (fakes: ReturnType<typeof makeFakes>, stack: FakeStack) => Promise<T>,
): Promise<T> {
  const conn = world.env.nativeConnection;
  const namespace = opts.namespace?.name;
  const workers = await Promise.all([
    Worker.create({ ...IN_THREAD, connection: conn, namespace, taskQueue: TASK_QUEUES.main, workflowBundle: world.bundle, activities: fakes.main, maxConcurrentActivityTaskExecutions: opts.mainSlots }),
    Worker.create({ connection: conn, namespace, taskQueue: TASK_QUEUES.trainerAnnounce, activities: fakes.announce }),
    ...(opts.trainers ?? ['w1']).map((w) => Worker.create({ connection: conn, namespace, taskQueue: `trainer-${w}`, activities: fakes.trainerFor(w), shutdownGraceTime: '1 second' })),
    ...(opts.hostQueues ?? []).map((q) => Worker.create({ connection: conn, namespace, taskQueue: q, activities: fakes.inferenceHost(q) })),
  ]);
  const running = workers.map((w) => w.run());
  const late: Promise<Worker>[] = [];
  const startRolloutWorker = () => {
    const created = Worker.create({ connection: conn, namespace, taskQueue: TASK_QUEUES.rollout, activities: fakes.rollout, maxConcurrentActivityTaskExecutions: opts.rolloutSlots });
    late.push(created);
    running.push(created.then((w) => w.run()));
  };
  if (opts.rollouts !== false) startRolloutWorker();
  try {
    return await fn(fakes, { fakes, client: opts.namespace?.client ?? world.env.client, startRolloutWorker });
  } finally {
    // A rollout worker started late may still be connecting: it joins the shutdown once created.
    for (const r of await Promise.allSettled(late)) if (r.status === 'fulfilled') workers.push(r.value);
    for (const w of workers) w.shutdown();
    await Promise.all(running);
  }
}

export { makeFakes, type FakeOptions };
