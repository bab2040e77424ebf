import { z } from 'zod';
import type { ArtifactRef } from '../artifacts/ref';
import { componentLogger, type Logger } from '../shared/logger';

/**
 * Worker liveness that other hosts can see: every rollout worker keeps a lease
 * record in the artifact store (shared by every host of a deployment) and renews
 * it while it runs. A janitor on any host that shares a Docker daemon with the
 * worker's sandboxes decides from the lease, not from a pid, whether the worker
 * that made a container is still alive.
 */
export const WorkerLease = z.object({
  workerId: z.string().min(1),
  host: z.string(),
  pid: z.number().int(),
  startedAt: z.string(),
  /** Writer's clock. Readers allow ttlMs, which also absorbs clock skew between hosts. */
  renewedAt: z.string(),
  ttlMs: z.number().int().positive(),
  /** Set on a clean shutdown: its containers can go at once. */
  releasedAt: z.string().optional(),
});
export type WorkerLease = z.infer<typeof WorkerLease>;

/** The part of the artifact store a lease needs. */
export interface LeaseBackend {
  putJson(key: string, value: unknown): Promise<ArtifactRef>;
  exists(key: string): Promise<ArtifactRef | undefined>;
  getJson<T = unknown>(ref: ArtifactRef): Promise<T>;
}

export const LEASE_PREFIX = 'workers/leases';

/** Store keys allow what container names allow; a worker id may hold ':'. */
export function leaseKey(workerId: string): string {
  return `${LEASE_PREFIX}/${workerId.replace(/[^a-zA-Z0-9_.-]/g, '_')}.json`;
}

export class LeaseStore {
  constructor(private readonly backend: LeaseBackend) {}

  async write(lease: WorkerLease): Promise<void> {
    await this.backend.putJson(leaseKey(lease.workerId), lease);
  }

  /** The worker's lease, or undefined if it never wrote one. Throws if the store cannot tell. */
  async read(workerId: string): Promise<WorkerLease | undefined> {
    // A renewal between exists() and getJson() changes the bytes under the ref's sha256: read again.
    for (let attempt = 1; ; attempt++) {
      const ref = await this.backend.exists(leaseKey(workerId));
      if (!ref) return undefined;
      try {
        return WorkerLease.parse(await this.backend.getJson(ref));
      } catch (err) {
        if (attempt >= 3 || (err as Error).name !== 'ArtifactIntegrityError') throw err;
      }
    }
  }
}

export type LeaseState = 'alive' | 'expired' | 'released' | 'missing';

/** Pure: what a lease says about its worker at `now` (the reader's clock). */
export function leaseState(lease: WorkerLease | undefined, now: number): LeaseState {
  if (!lease) return 'missing';
  if (lease.releasedAt) return 'released';
  const renewed = Date.parse(lease.renewedAt);
  if (!Number.isFinite(renewed) || now - renewed > lease.ttlMs) return 'expired';
  return 'alive';
}

export const DEFAULT_LEASE_RENEW_MS = 15_000;
/** Four missed renewals: a store hiccup or a GC pause must not get a live worker's sandboxes removed. */
export const DEFAULT_LEASE_TTL_MS = 60_000;

/**
 * Lease timing for this process: RATCHET_WORKER_LEASE_TTL_S (default 60) sets the ttl;
 * renewals come every quarter ttl and janitor sweeps every half ttl, so a dead worker's
 * sandboxes go within about 1.5 ttl.
 */
export function leaseTimingFromEnv(env: NodeJS.ProcessEnv = process.env): { ttlMs: number; renewMs: number; sweepMs: number } {
  const raw = env.RATCHET_WORKER_LEASE_TTL_S;
  const ttlS = raw === undefined || raw === '' ? DEFAULT_LEASE_TTL_MS / 1000 : Number(raw);
  if (!Number.isFinite(ttlS) || ttlS < 2) {
    throw new Error(`RATCHET_WORKER_LEASE_TTL_S="${raw}" is not a lease ttl: it must be a number of seconds >= 2. Fix: unset it (default 60) or set e.g. RATCHET_WORKER_LEASE_TTL_S=60`);
  }
  const ttlMs = Math.round(ttlS * 1000);
  return { ttlMs, renewMs: Math.round(ttlMs / 4), sweepMs: Math.round(ttlMs / 2) };
}

export interface LeaseKeeperOptions {
  workerId: string;
  host: string;
  pid?: number;
  renewMs?: number;
  ttlMs?: number;
  now?: () => number;
  log?: Logger;
}

/** Writes this worker's lease at start, renews it on a timer, and releases it on shutdown. */
export class LeaseKeeper {
  private timer: NodeJS.Timeout | undefined;
  private readonly startedAt: string;
  private readonly log: Logger;
  private readonly now: () => number;

  constructor(private readonly store: LeaseStore, private readonly opts: LeaseKeeperOptions) {
    this.now = opts.now ?? Date.now;
    this.startedAt = new Date(this.now()).toISOString();
    this.log = opts.log ?? componentLogger('sandbox');
  }

  get ttlMs(): number {
    return this.opts.ttlMs ?? DEFAULT_LEASE_TTL_MS;
  }

  private lease(extra: Partial<WorkerLease> = {}): WorkerLease {
    return {
      workerId: this.opts.workerId,
      host: this.opts.host,
      pid: this.opts.pid ?? process.pid,
      startedAt: this.startedAt,
      renewedAt: new Date(this.now()).toISOString(),
      ttlMs: this.ttlMs,
      ...extra,
    };
  }

  /** Writes the first lease (failing loudly: a worker without one would have its sandboxes swept) and starts renewing. */
  async start(): Promise<void> {
    await this.store.write(this.lease());
    const renewMs = this.opts.renewMs ?? DEFAULT_LEASE_RENEW_MS;
    if (renewMs * 2 > this.ttlMs) throw new Error(`lease renewal every ${renewMs} ms is too slow for a ${this.ttlMs} ms lease; renew at least twice per ttl`);
    this.timer = setInterval(() => {
      this.renew().catch((err: unknown) => this.log.warn({ err: String(err), workerId: this.opts.workerId }, 'worker lease renewal failed; retrying'));
    }, renewMs);
    this.timer.unref();
  }

  renew(): Promise<void> {
    return this.store.write(this.lease());
  }

  /** Marks the lease released so janitors remove what this worker left at once. */
  async release(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    await this.store.write(this.lease({ releasedAt: new Date(this.now()).toISOString() }));
  }
}
