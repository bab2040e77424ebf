/**
 * A private copy of the Ratchet workers for integration tests, against the
 * shared Temporal (7233), vLLM (8000) and Docker: its own task queues would need
 * a different workflow bundle, so it uses the real queue names and its own
 * artifact root, and checks the run invariants the fault tests rely on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, mkdtempSync, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import type { Progress, StepRecord, TrainRunResult } from '../../src/contracts';
import { progressQuery } from '../../src/workflows/messages';
import { REPO, STATE } from './stack';
import { checkRun } from '../../src/soak/invariants';
import { workerSpecs } from '../../src/stack';
import { serviceStatus, startService, stopService } from '../../src/stack/processes';

export interface Proc { name: string; child: ChildProcess }

export function startProc(name: string, cmd: string, args: string[], env: Record<string, string>, logDir: string, cwd = REPO): Proc {
  const out = createWriteStream(path.join(logDir, `${name}.log`), { flags: 'a' });
  const child = spawn(cmd, args, { cwd, env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  child.stdout!.pipe(out);
  child.stderr!.pipe(out);
  return { name, child };
}

export function killProc(p: Proc, signal: NodeJS.Signals = 'SIGKILL'): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    p.child.once('exit', () => resolve());
    p.child.kill(signal);
  });
}

/** A short worker lease, so the tests see a killed rollout worker's sandboxes swept within seconds. */
export const ROLLOUT_LEASE_TTL_S = 8;

export const workerCommands = (artifacts: string) => ({
  main: () => ['worker-main', process.execPath, [path.join(REPO, 'dist', 'workers', 'main.js')], { RATCHET_ARTIFACTS: artifacts }] as const,
  rollout: () => ['worker-rollout', process.execPath, [path.join(REPO, 'dist', 'workers', 'rollout.js')], { RATCHET_ARTIFACTS: artifacts, RATCHET_ROLLOUT_SLOTS: '2', RATCHET_WORKER_LEASE_TTL_S: String(ROLLOUT_LEASE_TTL_S) }] as const,
  trainer: () => ['worker-trainer', path.join(STATE, 'venvs', 'trainer', 'bin', 'python'), ['-m', 'ratchet_trainer.worker', '--artifacts', artifacts], { PYTHONUNBUFFERED: '1', PYTHONPATH: path.join(REPO, 'trainer') }] as const,
});

export const distBuilt = () => existsSync(path.join(REPO, 'dist', 'workers', 'main.js')) && existsSync(path.join(REPO, 'dist', 'workers', 'rollout.js'));

export interface TinyConfigOptions {
  maxSteps?: number;
  asyncLevel?: number;
  /** Rollouts of the task per step (default 2); all of a step's rollouts are one chunk. */
  rolloutsPerExample?: number;
  /** The run's name and its file's, `<name>.toml` (default "tiny", in a file named by the options above). */
  name?: string;
  /** TOML lines added to [sampling] and to [orchestrator], and whole tables after the config's own. */
  sampling?: string;
  orchestrator?: string;
  tables?: string;
}

/**
 * How the tests that kill a trainer or a rollout worker notice it: 20 s heartbeat and schedule-to-start timeouts
 * (the run input; the CPU defaults are a minute) over heartbeats every 5 s (the config's [liveness], default 10 s;
 * a timeout must be at least three periods, TrainRunInput.rolloutHeartbeat). Temporal's SDKs send a heartbeat at most
 * every 0.8 x the timeout (16 s), so the server sees one every 16 s and the timeout keeps 4 s of margin (6 s at 30).
 */
export const FAST_LIVENESS = {
  toml: '[liveness]\nheartbeat_every_s = 5',
  trainerTimeouts: { scheduleToStart: '20 seconds', heartbeat: '20 seconds' },
  rolloutHeartbeat: '20 seconds',
} as const;

/** A tiny config: 1 task x 2 rollouts, 2 steps, 32 tokens a turn; the options add to it. */
export async function tinyConfig(dir: string, opts: TinyConfigOptions = {}): Promise<string> {
  const file = path.join(dir, opts.name ? `${opts.name}.toml` : `tiny-${opts.maxSteps ?? 2}-a${opts.asyncLevel ?? 1}-r${opts.rolloutsPerExample ?? 2}.toml`);
  const lines = (toml: string | undefined) => (toml ? `${toml.trim()}\n` : '');
  await fs.writeFile(file, `name = "${opts.name ?? 'tiny'}"
[trainer]
device = "cpu"
[sampling]
max_tokens = 32
${lines(opts.sampling)}[orchestrator]
batch_size = 1
rollouts_per_example = ${opts.rolloutsPerExample ?? 2}
max_steps = ${opts.maxSteps ?? 2}
async_level = ${opts.asyncLevel ?? 1}
max_concurrent_rollouts = 2
${lines(opts.orchestrator)}[[env]]
id = "swe-grep"
[env.args]
max_tokens = 256
max_tool_calls = 3
max_turns = 3
${lines(opts.tables)}`);
  return file;
}

/**
 * Whether a suite that took the stack over leaves it so (RATCHET_DEFER_STACK_RESTORE=1, infra/test.sh's integration
 * stage): the sequencer (test/helpers/integrationOrder.js) runs such suites after every suite that needs the stack's
 * workers, multihost (which also stops the stack's vLLM) last, and infra/test.sh starts what is missing afterwards
 * outside CI. Each give-back cost a suite ~8 s (the workers' minimum uptimes), multihost's ~50 s (vLLM's start).
 */
export const deferStackRestore = (): boolean => process.env.RATCHET_DEFER_STACK_RESTORE === '1';

/**
 * Stops the workers `ratchet up` started, so the test's own workers (with their
 * own artifact root) are the only ones polling the shared queues; the returned
 * function starts them again (unless deferStackRestore()). All at once: each start waits
 * out its minimum uptime (4 s main, 4 s rollout, 8 s trainer), which one after another
 * cost every suite using this 16 s instead of 8.
 */
export async function takeOverStackWorkers(): Promise<() => Promise<void>> {
  const wasRunning = workerSpecs().filter((s) => serviceStatus(s.name).running);
  await Promise.all(wasRunning.map((s) => stopService(s.name)));
  return async () => {
    if (deferStackRestore()) return;
    await Promise.all(wasRunning.map((s) => startService(s)));
  };
}

/** The run invariants (src/soak/invariants.ts, shared with the soak): any violation fails the test with its text. */
export async function checkInvariants(p: { artifacts: string; runId: string; maxSteps: number; rolloutsPerStep: number; inferenceUrl: string }): Promise<StepRecord[]> {
  const { violations, records } = await checkRun({ runId: p.runId, artifactsRoot: p.artifacts, maxSteps: p.maxSteps, rolloutsPerStep: p.rolloutsPerStep, inferenceUrl: p.inferenceUrl });
  expect(violations).toEqual([]);
  return records;
}

export type WorkerKind = 'main' | 'rollout' | 'trainer';

/** A suite's own Ratchet workers on the real stack (useStackWorkers). */
export interface StackWorkers {
  /** The suite's scratch directory (worker logs, configs) and its artifact root inside it. */
  readonly dir: string;
  readonly artifacts: string;
  /** The worker of each kind now running, if any. */
  readonly workers: Record<WorkerKind, Proc | undefined>;
  /** A client of the stack's Temporal server; set before the suite's first test. */
  client: Client;
  /** Starts (again) the worker of one kind, with the suite's artifact root. */
  start(which: WorkerKind): Proc;
  /** Kills the worker of one kind (SIGKILL unless told) and waits for it to exit. */
  kill(which: WorkerKind, signal?: NodeJS.Signals): Promise<void>;
}

/**
 * The one stack fixture of the real-stack suites: before the suite, the workers `ratchet up` started are
 * stopped, the suite's own workers of the kinds in `start` are started with a private artifact root, and a
 * client connects; after it, they are stopped and the stack's workers started again (unless deferStackRestore()).
 */
export function useStackWorkers(label: string, opts: { start?: WorkerKind[] } = {}): StackWorkers {
  const dir = mkdtempSync(path.join(os.tmpdir(), `ratchet-${label}-`));
  const artifacts = path.join(dir, 'artifacts');
  const cmds = workerCommands(artifacts);
  const workers: Record<WorkerKind, Proc | undefined> = { main: undefined, rollout: undefined, trainer: undefined };
  let restoreStackWorkers: () => Promise<void> = async () => {};
  let connection: Connection | undefined;
  const stack: StackWorkers = {
    dir, artifacts, workers, client: undefined as unknown as Client,
    start(which) {
      const c = cmds[which]();
      const p = startProc(c[0], c[1], [...c[2]], c[3], dir);
      workers[which] = p;
      return p;
    },
    async kill(which, signal = 'SIGKILL') {
      const p = workers[which];
      if (p) await killProc(p, signal);
    },
  };
  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    stack.client = new Client({ connection });
    for (const which of opts.start ?? ['main', 'rollout', 'trainer']) stack.start(which);
  });
  afterAll(async () => {
    await Promise.all(Object.values(workers).map((p) => p && killProc(p, 'SIGTERM')));
    await connection?.close();
    await restoreStackWorkers();
  });
  return stack;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Polls a run's progress until `pred` holds; rides out moments with no worker or no server. With
 * `failIfEnded`, a run that ended first fails at once instead of at the deadline.
 */
export async function waitForProgress(
  handle: WorkflowHandle, what: string, pred: (p: Progress) => boolean, opts: { timeoutMs?: number; failIfEnded?: boolean } = {},
): Promise<Progress> {
  const deadline = Date.now() + (opts.timeoutMs ?? 600_000);
  let last: Progress | undefined;
  while (Date.now() < deadline) {
    try {
      last = await handle.query(progressQuery);
      if (pred(last)) return last;
    } catch { /* no worker or server right now */ }
    if (opts.failIfEnded) {
      const { status } = await handle.describe();
      if (status.name !== 'RUNNING') throw new Error(`the run ended (${status.name}) while waiting for ${what}; last progress: ${JSON.stringify(last)}`);
    }
    await sleep(500);
  }
  throw new Error(`timed out waiting for ${what}; last progress: ${JSON.stringify(last)}`);
}

/** A run's result, riding out a Temporal server that is briefly down; a failed run throws. */
export async function runResult(handle: WorkflowHandle): Promise<TrainRunResult> {
  for (;;) {
    try {
      return (await handle.result()) as TrainRunResult;
    } catch (err) {
      if (err instanceof WorkflowFailedError) throw err;
      await sleep(2000);
    }
  }
}
