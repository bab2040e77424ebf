/**
 * A private copy of the Ratchet workers for integration tests, against the
 * shared Temporal (7233), vLLM (8000) and Docker: its own task queues would need
 * a different workflow bundle, so it uses the real queue names and its own
 * artifact root, and checks the run invariants the fault tests rely on.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, existsSync, promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { StepRecord } from '../../src/contracts';
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
}

/** A tiny config: 1 task x 2 rollouts, 2 steps, 32 tokens a turn. */
export async function tinyConfig(dir: string, opts: TinyConfigOptions = {}): Promise<string> {
  const file = path.join(dir, `tiny-${opts.maxSteps ?? 2}-a${opts.asyncLevel ?? 1}-r${opts.rolloutsPerExample ?? 2}.toml`);
  await fs.writeFile(file, `name = "tiny"
[trainer]
device = "cpu"
[sampling]
max_tokens = 32
[orchestrator]
batch_size = 1
rollouts_per_example = ${opts.rolloutsPerExample ?? 2}
max_steps = ${opts.maxSteps ?? 2}
async_level = ${opts.asyncLevel ?? 1}
max_concurrent_rollouts = 2
[[env]]
id = "swe-grep"
[env.args]
max_tokens = 256
max_tool_calls = 3
max_turns = 3
`);
  return file;
}

/**
 * Stops the workers `ratchet up` started, so the test's own workers (with their
 * own artifact root) are the only ones polling the shared queues; the returned
 * function starts them again.
 */
export async function takeOverStackWorkers(): Promise<() => Promise<void>> {
  const wasRunning = workerSpecs().filter((s) => serviceStatus(s.name).running);
  for (const s of wasRunning) await stopService(s.name);
  return async () => {
    for (const s of wasRunning) await startService(s);
  };
}

/** The run invariants (src/soak/invariants.ts, shared with the soak): any violation fails the test with its text. */
export async function checkInvariants(p: { artifacts: string; runId: string; maxSteps: number; rolloutsPerStep: number; inferenceUrl: string }): Promise<StepRecord[]> {
  const { violations, records } = await checkRun({ runId: p.runId, artifactsRoot: p.artifacts, maxSteps: p.maxSteps, rolloutsPerStep: p.rolloutsPerStep, inferenceUrl: p.inferenceUrl });
  expect(violations).toEqual([]);
  return records;
}
