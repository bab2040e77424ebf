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
import { workerSpecs } from '../stack';
import { isAlive, readPid } from '../shared/pidFiles';
import { serviceStatus, startService } from '../stack/processes';
import { paths, REPO_ROOT } from '../shared/paths';
import type { Logger } from '../shared/logger';
import type { FaultKind } from './schedule';

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
  logger: Logger;
}

const WORKER_OF: Partial<Record<FaultKind, string>> = {
  'kill-main': 'worker-main',
  'kill-rollout': 'worker-rollout',
  'kill-trainer': 'worker-trainer',
  'hang-trainer': 'worker-trainer',
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

/** The target's pid, or a reason the fault cannot be injected now. */
async function targetPid(kind: FaultKind, opts: FaultOptions): Promise<number | string> {
  if (kind === 'lose-replica') return pidFromFile(opts.replicaPidFile) ?? 'no second inference replica is running (the soak starts one with --replica-loss)';
  const worker = WORKER_OF[kind];
  if (worker) return readPid(worker) ?? `${worker} is not running`;
  if (kind === 'hang-vllm') return vllmPid() ?? 'vLLM is not running';
  if (kind === 'restart-dockerd') return (await dockerdPid()) ?? 'dockerd is not running';
  return 0; // restart-temporal goes through its script
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
