/**
 * Fault injection on the local stack, and the repair an operator (or systemd's
 * Restart=always) would make: a killed worker is started again after a short
 * delay, a hung process is continued, a restarted service is started. The run
 * itself gets no help: it must notice and recover on its own.
 */
import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { supervisorSpec, workerSpecs } from '../stack';
import { isAlive, readPid } from '../shared/pidFiles';
import { serviceStatus, startService, stopService } from '../stack/processes';
import { paths, REPO_ROOT } from '../shared/paths';
import { defaultImage } from '../sandbox/options';
import type { Logger } from '../shared/logger';
import type { FaultKind } from './schedule';
import { setStoreKey, type SoakStore } from './storeKey';

const run = promisify(execFile);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export interface FaultOptions {
  /** How long a hung process stays stopped before SIGCONT. */
  hangMs: number;
  /** How long a partition holds before it is healed. */
  partitionMs?: number;
  /** The extra inference replica's pid file (`lose-replica` kills it for good). */
  replicaPidFile?: string;
  /** How long a killed worker stays dead before it is started again. */
  restartDelayMs: number;
  /** How long an incident (INCIDENT_KINDS) lasts before the operator's repair. */
  incidentMs?: number;
  /** The run under the soak (slow-save slows the trainer's reads of its checkpoints). */
  runId?: string;
  /** Where an armed trainer writes that its injected error fired (a fresh path per fault). */
  markerFile?: string;
  /** The soak's MinIO user, which every worker uses (store-credentials disables it for incidentMs). */
  store?: Pick<SoakStore, 'admin' | 'accessKey'>;
  logger: Logger;
}

const WORKER_OF: Partial<Record<FaultKind, string>> = {
  'kill-main': 'worker-main',
  'kill-rollout': 'worker-rollout',
  'kill-trainer': 'worker-trainer',
  'hang-trainer': 'worker-trainer',
  'trainer-untyped-error': 'worker-trainer',
  'slow-save': 'worker-trainer',
};

/** Signals a process's whole group (services start detached, as group leaders), else the process. */
function signalGroup(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pid, sig);
  } catch {
    try { process.kill(pid, sig); } catch { /* already gone */ }
  }
}

function vllmPid(): number | undefined {
  try {
    const pid = Number(readFileSync(path.join(paths.run(), 'vllm.pid'), 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

async function infra(script: string, verb: string): Promise<void> {
  await run('bash', [path.join(REPO_ROOT, 'infra', script), verb], { cwd: REPO_ROOT, timeout: 15 * 60_000 });
}

/** Starts the worker again unless something (a supervisor) already did. */
async function ensureWorker(name: string): Promise<void> {
  if (serviceStatus(name).running) return;
  const spec = workerSpecs().find((s) => s.name === name);
  if (!spec) throw new Error(`soak: no worker named ${name} in the stack`);
  await startService(spec);
}

async function waitGone(pid: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(200);
}

async function dockerdPid(): Promise<number | undefined> {
  try {
    const { stdout } = await run('pidof', ['dockerd']);
    const pid = Number(stdout.trim().split(/\s+/)[0]);
    return pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

/** The port each partition cuts (on the loopback, where the local stack listens). */
const PARTITION_PORT: Partial<Record<FaultKind, number>> = {
  'partition-inference': 8000,
  'partition-temporal': 7233,
};

/**
 * The rule a partition adds: packets to the port over the loopback are dropped, so a client's
 * connect or request hangs until its own timeout, as across a cut network (a refused
 * connection, which a stopped server gives, is the easier case). The comment marks it as the
 * soak's, so healing removes exactly it.
 */
export function partitionRule(port: number): string[] {
  return ['INPUT', '-i', 'lo', '-p', 'tcp', '--dport', String(port), '-m', 'comment', '--comment', `ratchet-soak-partition-${port}`, '-j', 'DROP'];
}

async function cutPort(port: number): Promise<void> {
  await run('iptables', ['-I', ...partitionRule(port)]);
}

/** Removes every copy of the rule (a soak killed mid-partition may have left one). */
export async function healPort(port: number): Promise<void> {
  for (let i = 0; i < 10; i++) {
    try {
      await run('iptables', ['-D', ...partitionRule(port)]);
    } catch {
      return; // no such rule left
    }
  }
}

function pidFromFile(file: string | undefined): number | undefined {
  if (!file) return undefined;
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 && isAlive(pid) ? pid : undefined;
  } catch {
    return undefined;
  }
}

const exec = (cmd: string, args: string[]) => run(cmd, args, { timeout: 120_000 });

/**
 * The trainer stopped (SIGTERM, as a deploy does) and started again with `env` added: an operator's
 * restart, armed with an incident. Its replacement after the incident (the supervisor's, or
 * ensureWorker's) has the stack's environment again.
 */
async function restartTrainerWith(env: Record<string, string>): Promise<void> {
  // Off the supervisor's books while it stops (stopService), so the armed start is the one that runs.
  await stopService('worker-trainer', 60_000);
  const spec = workerSpecs().find((s) => s.name === 'worker-trainer');
  if (!spec) throw new Error('soak: no worker-trainer in the stack');
  const started = await startService({ ...spec, env: { ...spec.env, ...env } });
  if (started !== 'started') throw new Error('a trainer was already running again before the armed one could start: the incident was not armed');
}

/**
 * The stack's workers and its supervisor stopped and started again with this process's environment: how
 * the soak gives every worker its store key (a worker's SDK reads its credentials at start), and how it
 * takes the key away again at its end. The supervisor's restarts of a worker inherit its environment.
 */
export async function restartStackWorkers(): Promise<void> {
  const supervised = serviceStatus('supervisor').running;
  // The supervisor first: it would otherwise start the workers again as they stop.
  await stopService('supervisor');
  for (const spec of [...workerSpecs()].reverse()) await stopService(spec.name, 60_000);
  await Promise.all(workerSpecs().map((spec) => startService(spec)));
  if (supervised) await startService(supervisorSpec());
}

/** Kinds that leave the stack's trainer started with an incident's environment. */
export const ARMS_TRAINER: readonly FaultKind[] = ['trainer-untyped-error', 'slow-save'];

/** The stack's trainer as the stack starts it: after a soak that armed one, whoever uses the stack next gets no injected fault. */
export async function restorePlainTrainer(): Promise<void> {
  await restartTrainerWith({});
}

/** The slow disk the trainer tests use (trainer/tests/slow_disk): reads of 64 KiB or more under `under` sleep first, until `untilS`. */
export function slowDiskEnv(under: string, readS: number, untilS: number): Record<string, string> {
  return {
    PYTHONPATH: [path.join(REPO_ROOT, 'trainer', 'tests', 'slow_disk'), path.join(REPO_ROOT, 'trainer')].join(path.delimiter),
    RATCHET_TEST_SLOW_READ_UNDER: under, RATCHET_TEST_SLOW_READ_S: String(readS), RATCHET_TEST_SLOW_READ_UNTIL: String(untilS),
  };
}

/** trainer_stall_s of a soak with slow saves: the schema's least (the soak's micro-batches take seconds on the CPU). */
export const SLOW_SAVE_STALL_S = 60;
/** Each 1 MiB read of the run's checkpoints sleeps this long while the disk is slow (the soak's checkpoint is ~30 MiB). */
const SLOW_READ_S = 3;
/** How long the disk stays slow: the replacement's load, a step and its save (each ~90 s of slow reads) fall in it. */
const SLOW_SAVE_WINDOW_S = 4 * SLOW_SAVE_STALL_S;

/** The injected error: the words torch uses for a CUDA fault, on a RuntimeError (no type of ours). */
export const CUDA_STYLE_ERROR = 'CUDA error: an illegal memory access was encountered (injected by the soak)';

/** The target's pid, or a reason the fault cannot be injected now. */
async function targetPid(kind: FaultKind, opts: FaultOptions): Promise<number | string> {
  if (kind === 'lose-replica') return pidFromFile(opts.replicaPidFile) ?? 'no second inference replica is running (the soak starts one with --replica-loss)';
  const worker = WORKER_OF[kind];
  if (worker) return readPid(worker) ?? `${worker} is not running`;
  if (kind === 'hang-vllm') return vllmPid() ?? 'vLLM is not running';
  if (kind === 'restart-dockerd' || kind === 'sick-host-dockerd') return (await dockerdPid()) ?? 'dockerd is not running';
  if (kind === 'store-credentials' && !opts.store) return 'the run is not on a MinIO user of the soak\'s own (runSoak sets one up when store-credentials is planned)';
  return 0; // restart-temporal goes through its script; sick-host-image through docker's CLI; store-credentials through MinIO's admin API
}

/**
 * Injects one fault and makes the operator's repair. Resolves once the repair is
 * done (a hang: after SIGCONT); the run's own recovery is measured by the caller.
 */
export async function injectFault(kind: FaultKind, opts: FaultOptions): Promise<void> {
  const pid = await targetPid(kind, opts);
  if (typeof pid === 'string') throw new Error(`soak: cannot inject ${kind}: ${pid}`);
  opts.logger.info({ kind, pid }, 'injecting fault');
  switch (kind) {
    case 'kill-main':
    case 'kill-rollout':
    case 'kill-trainer': {
      signalGroup(pid, 'SIGKILL');
      await waitGone(pid, 10_000);
      await sleep(opts.restartDelayMs);
      await ensureWorker(WORKER_OF[kind]!);
      return;
    }
    case 'hang-trainer':
    case 'hang-vllm': {
      signalGroup(pid, 'SIGSTOP');
      await sleep(opts.hangMs);
      signalGroup(pid, 'SIGCONT');
      // A liveness supervisor may have replaced the frozen process meanwhile: make sure one runs.
      if (kind === 'hang-trainer') await ensureWorker('worker-trainer');
      else await infra('inference.sh', 'start');
      return;
    }
    case 'restart-temporal': {
      await infra('temporal.sh', 'stop');
      await sleep(opts.restartDelayMs);
      // The stop removes the pid file first, so the stack's supervisor leaves the server down for this start.
      await infra('temporal.sh', 'start');
      return;
    }
    case 'partition-inference':
    case 'partition-temporal': {
      const port = PARTITION_PORT[kind]!;
      await cutPort(port);
      try {
        await sleep(opts.partitionMs ?? 60_000);
      } finally {
        await healPort(port);
      }
      return;
    }
    case 'lose-replica': {
      // For good: no operator brings it back during the run; the run must go on with one.
      signalGroup(pid, 'SIGKILL');
      await waitGone(pid, 10_000);
      return;
    }
    case 'sick-host-dockerd': {
      // Longer than a restart: rollouts fail to start their sandboxes, the host takes itself out of service.
      signalGroup(pid, 'SIGTERM');
      await waitGone(pid, 60_000);
      if (isAlive(pid)) signalGroup(pid, 'SIGKILL');
      await sleep(opts.incidentMs ?? 60_000);
      await infra('docker.sh', 'start');
      return;
    }
    case 'sick-host-image': {
      // The tag goes (docker rmi of a tag another tag shares only untags), so the image's layers stay for the repair.
      const image = defaultImage();
      const keep = `ratchet-soak-keep:${Date.now().toString(36)}`;
      await exec('docker', ['tag', image, keep]);
      try {
        await exec('docker', ['rmi', image]);
        await sleep(opts.incidentMs ?? 60_000);
      } finally {
        await exec('docker', ['tag', keep, image]);
        await exec('docker', ['rmi', keep]);
      }
      return;
    }
    case 'trainer-untyped-error': {
      if (!opts.markerFile) throw new Error('soak: trainer-untyped-error needs a marker file');
      // Raised once, by the next trainer.step; the trainer reports TrainerFault, fences itself (exit 76), and the
      // supervisor starts a plain one, on which the workflow retries the step.
      await restartTrainerWith({
        RATCHET_TRAINER_FAULT_RAISE: CUDA_STYLE_ERROR, RATCHET_TRAINER_FAULT_ONCE: '1', RATCHET_TRAINER_FAULT_MARKER: opts.markerFile,
      });
      return;
    }
    case 'slow-save': {
      if (!opts.runId) throw new Error('soak: slow-save needs the run id');
      // ~30 slow reads a save or load of the soak's checkpoint: each outlasts trainer_stall_s, beating its bytes between reads.
      await restartTrainerWith(slowDiskEnv(`/runs/${opts.runId}/checkpoints/`, SLOW_READ_S, Math.ceil(Date.now() / 1000) + SLOW_SAVE_WINDOW_S));
      return;
    }
    case 'store-credentials': {
      // Every worker's key refused (HTTP 403 InvalidAccessKeyId) until the operator puts it back; no process is restarted.
      await setStoreKey(opts.store!, 'disabled');
      try {
        await sleep(opts.incidentMs ?? 60_000);
      } finally {
        await setStoreKey(opts.store!, 'enabled');
      }
      return;
    }
    case 'restart-dockerd': {
      signalGroup(pid, 'SIGTERM');
      await waitGone(pid, 60_000);
      if (isAlive(pid)) signalGroup(pid, 'SIGKILL');
      await sleep(opts.restartDelayMs);
      await infra('docker.sh', 'start');
      return;
    }
  }
}
