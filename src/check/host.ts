import * as os from 'node:os';
import Docker from 'dockerode';
import type { RunConfig } from '../config/schema';
import { fail, ok, warn, type CheckLine } from './types';

/** What Docker can give a container on this host. */
export interface HostCapacity {
  cpus: number;
  memoryBytes: number;
  /** "docker info" or "this machine (dockerd not reachable)". */
  source: string;
}

/** Docker's own view (NCPU, MemTotal), or this machine's when dockerd does not answer. */
export async function hostCapacity(docker: Docker = new Docker()): Promise<HostCapacity> {
  try {
    const info = await Promise.race([
      docker.info() as Promise<{ NCPU: number; MemTotal: number }>,
      new Promise<never>((_r, reject) => setTimeout(() => reject(new Error('timeout')), 3_000).unref()),
    ]);
    return { cpus: info.NCPU, memoryBytes: info.MemTotal, source: 'docker info' };
  } catch {
    return { cpus: os.cpus().length, memoryBytes: os.totalmem(), source: 'this machine (dockerd not reachable)' };
  }
}

const MiB = 1024 * 1024;

/** Limits Docker would refuse when a sandbox is acquired, found now. */
export function checkHostLimits(c: RunConfig, host: HostCapacity): CheckLine[] {
  const lines: CheckLine[] = [];
  const s = c.sandbox;
  const memMb = Math.floor(host.memoryBytes / MiB);
  if (s.cpus > host.cpus) {
    lines.push(fail('host', `sandbox.cpus = ${s.cpus}: Docker refuses more CPUs than the host has (${host.cpus}, from ${host.source}). Fix: set sandbox.cpus to ${host.cpus} or less`));
  }
  if (s.memory_mb > memMb) {
    lines.push(fail('host', `sandbox.memory_mb = ${s.memory_mb}: more than the host's memory (${memMb} MB, from ${host.source}). Fix: set sandbox.memory_mb below ${memMb}`));
  }
  const concurrent = c.orchestrator.max_concurrent_rollouts + s.warm_pool_size;
  if (s.memory_mb <= memMb && concurrent * s.memory_mb > memMb) {
    lines.push(warn('host', `orchestrator.max_concurrent_rollouts + sandbox.warm_pool_size = ${concurrent} sandboxes of sandbox.memory_mb = ${s.memory_mb} MB ` +
      `may use ${concurrent * s.memory_mb} MB, more than the host's ${memMb} MB (several rollout hosts share this, so only a warning)`));
  }
  if (lines.length === 0) lines.push(ok('host', `sandbox limits fit the host (${host.cpus} CPUs, ${memMb} MB, from ${host.source})`));
  return lines;
}
