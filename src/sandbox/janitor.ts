import Docker from 'dockerode';
import { componentLogger, type Logger } from '../shared/logger';
import { LABELS } from './labels';
import { DEFAULT_LEASE_TTL_MS, leaseState, type LeaseState, type LeaseStore } from './lease';
import { removeContainer } from './removal';

export interface JanitorOptions {
  /** Where workers' leases live: the artifact store every host of the deployment shares. */
  leases: LeaseStore;
  /** This worker: its own containers are never swept, whatever its lease read says. */
  selfId?: string;
  /** Containers older than this go whoever made them: the backstop for a lease that lies. */
  maxAgeMs?: number;
  now?: () => number;
  log?: Logger;
  /**
   * This worker's own containers whose removal failed (SandboxManager.removeLeftovers): the sweep keeps a live
   * worker's containers, so each tick retries these first. Returns how many are still left.
   */
  removeOwnLeftovers?: () => Promise<number>;
}

export const DEFAULT_MAX_AGE_MS = 3 * 60 * 60 * 1000;

/** 'unknown' when the lease could not be read: the janitor then keeps the container. */
export type WorkerState = LeaseState | 'unknown';

export interface RemovalContext {
  now: number;
  maxAgeMs: number;
  selfId?: string;
  workerState: (workerId: string) => WorkerState;
}

/** Why a labelled container should go, or null to keep it. Pure. */
export function removalReason(labels: Record<string, string>, ctx: RemovalContext): string | null {
  const created = Date.parse(labels[LABELS.created] ?? '');
  const age = Number.isFinite(created) ? ctx.now - created : Infinity;
  if (age > ctx.maxAgeMs) return 'older than max age';
  const worker = labels[LABELS.worker];
  if (!worker) return 'no worker label';
  if (worker === ctx.selfId) return null;
  switch (ctx.workerState(worker)) {
    case 'released':
      return 'worker shut down';
    case 'expired':
      return 'worker lease expired';
    case 'missing':
      // A worker writes its lease before its first container, so none at all means a worker
      // this janitor cannot judge: an older Ratchet mid-upgrade, or another deployment with
      // its own store on the same Docker daemon. Only max age removes those.
    case 'alive':
    case 'unknown':
      return null;
  }
}

/**
 * Removes Ratchet containers whose worker's lease expired or was released, or that
 * outlived maxAgeMs. Sees every container of this Docker daemon, whichever host's
 * worker made it, so a worker host that died entirely is cleaned up by a live one.
 */
export async function sweep(docker: Docker, opts: JanitorOptions): Promise<{ removed: string[]; kept: number }> {
  const log = opts.log ?? componentLogger('sandbox');
  const left = await opts.removeOwnLeftovers?.().catch(() => undefined);
  if (left) log.warn({ left }, 'sandboxes of this worker whose removal failed are still there; retried next sweep');
  const containers = await docker.listContainers({ all: true, filters: { label: [LABELS.worker] } });
  const now = (opts.now ?? Date.now)();
  const states = new Map<string, WorkerState>();
  for (const worker of new Set(containers.map((c) => c.Labels?.[LABELS.worker]).filter((w): w is string => !!w))) {
    if (worker === opts.selfId) continue;
    try {
      states.set(worker, leaseState(await opts.leases.read(worker), now));
    } catch (err) {
      // An unreachable store says nothing about the worker: keep its containers this round.
      log.warn({ worker, err: String(err) }, 'janitor could not read a worker lease; keeping its sandboxes');
      states.set(worker, 'unknown');
    }
  }
  const ctx: RemovalContext = {
    now,
    maxAgeMs: opts.maxAgeMs ?? DEFAULT_MAX_AGE_MS,
    selfId: opts.selfId,
    workerState: (w) => states.get(w) ?? 'unknown',
  };
  const removed: string[] = [];
  for (const info of containers) {
    const reason = removalReason(info.Labels ?? {}, ctx);
    if (!reason) continue;
    try {
      // Counted and logged only when this sweep removed it (not one another removal took first).
      if (await removeContainer(docker.getContainer(info.Id)) === 'gone') continue;
      removed.push(info.Id);
      log.info({ id: info.Id, name: info.Names?.[0], worker: info.Labels?.[LABELS.worker], reason }, 'janitor removed sandbox');
    } catch (err) {
      log.warn({ id: info.Id, err: String(err) }, 'janitor could not remove sandbox');
    }
  }
  return { removed, kept: containers.length - removed.length };
}

/** Two sweeps per lease ttl: a dead worker's sandboxes go within about 1.5 ttl. */
export const DEFAULT_SWEEP_INTERVAL_MS = DEFAULT_LEASE_TTL_MS / 2;

/** Sweeps now and every intervalMs until stopped; the timer does not keep the process alive. */
export function startJanitor(docker: Docker, opts: JanitorOptions & { intervalMs?: number }): { stop: () => void } {
  const log = opts.log ?? componentLogger('sandbox');
  const tick = () => {
    sweep(docker, opts).catch((err: unknown) => log.warn({ err: String(err) }, 'janitor sweep failed'));
  };
  tick();
  const timer = setInterval(tick, opts.intervalMs ?? DEFAULT_SWEEP_INTERVAL_MS);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
