import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import Docker from 'dockerode';
import type { SandboxConfig } from '../config/schema';
import { componentLogger, type Logger } from '../shared/logger';
import { AbortError } from './exec';
import { LABELS, type RolloutLabels, containerName, currentWorkerId } from './labels';
import { buildCreateOptions, DEFAULT_MAX_LIFETIME_S, defaultImage, poolKey, type SandboxLimits, TMP_MB } from './options';
import { createImageDigests, type ImageDigest } from './imageDigest';

/**
 * A warm container waits in its pool at most this long: it is made with this much more lifetime, so
 * the rollout that takes it still has the full sandbox.max_lifetime_s; an older one is discarded.
 */
export const POOL_IDLE_S = 600;
import { WarmPool } from './pool';
import { removeContainer } from './removal';
import { DockerSandbox, type ImageRepoSpec, type RepoSpec, type Sandbox } from './sandbox';

export interface AcquireSpec {
  image?: string;
  repo?: RepoSpec;
  /** The image already holds the repository (at dir): copy it into /work/repo at baseCommit. */
  imageRepo?: ImageRepoSpec;
  labels: RolloutLabels;
  limits: SandboxConfig;
  /** Aborting removes a half-made sandbox and rejects with AbortError. */
  signal?: AbortSignal;
}

export interface SandboxManagerOptions {
  docker?: Docker;
  workerId?: string;
  image?: string;
  log?: Logger;
}

export type AcquireSource = 'pool' | 'cold';

/**
 * Hands out hardened sandboxes, one per rollout, from a warm pool per
 * (image, limits) when it has one ready, else created on the spot.
 */
export class SandboxManager {
  readonly docker: Docker;
  readonly workerId: string;
  private readonly image: string;
  private readonly log: Logger;
  private readonly pools = new Map<string, WarmPool<Docker.Container>>();
  /** How the last acquire got its container; the benchmark reads it. */
  lastSource: AcquireSource | undefined;
  private busy = 0;
  private readonly digests: (name: string) => Promise<ImageDigest>;
  /** When each warm container started (performance.now()), to discard one idle past POOL_IDLE_S. */
  private readonly warmSince = new Map<string, number>();
  /**
   * Containers of this worker whose removal failed (dockerd restarting, its socket gone): the janitor keeps a live
   * worker's containers, so without a retry they would stay until the worker exits or the janitor's max age.
   */
  private readonly leftovers = new Map<string, Docker.Container>();

  constructor(opts: SandboxManagerOptions = {}) {
    this.docker = opts.docker ?? new Docker();
    this.workerId = opts.workerId ?? currentWorkerId();
    this.image = opts.image ?? defaultImage();
    this.log = opts.log ?? componentLogger('sandbox');
    this.digests = createImageDigests(this.docker);
  }

  /** The image `acquire(spec)` runs (the task's, else [sandbox].image, else the stack default), by id; cached per name. */
  imageDigest(spec: Pick<AcquireSpec, 'image' | 'limits'>): Promise<ImageDigest> {
    return this.digests(spec.image ?? spec.limits.image ?? this.image);
  }

  async acquire(spec: AcquireSpec): Promise<Sandbox> {
    if (spec.signal?.aborted) throw new AbortError();
    const started = performance.now();
    const image = spec.image ?? spec.limits.image ?? this.image;
    const name = containerName(spec.labels, randomBytes(3).toString('hex'));
    const pool = this.poolFor(image, spec.limits);

    let container = pool?.take();
    while (container && this.idleTooLong(container)) {
      await this.removeOrKeep(container);
      container = pool?.take();
    }
    if (container) this.warmSince.delete(container.id);
    let source: AcquireSource = 'pool';
    if (container) {
      try {
        // Docker cannot relabel a container: the name carries run/step/rollout instead.
        await container.rename({ name });
      } catch (err) {
        this.log.warn({ err: String(err) }, 'warm container unusable; creating one');
        await this.removeOrKeep(container);
        container = undefined;
      }
    }
    if (!container) {
      source = 'cold';
      const labels = {
        ...this.baseLabels(),
        [LABELS.run]: spec.labels.run,
        [LABELS.step]: String(spec.labels.step),
        [LABELS.rollout]: spec.labels.rollout,
      };
      container = await this.createStarted(image, spec.limits, labels, name, spec.signal);
    }

    const sandbox = new DockerSandbox(this.docker, container, name, spec.limits, this.log, (c) => this.leftovers.set(c.id, c));
    try {
      if (spec.signal?.aborted) throw new AbortError();
      if (spec.repo) await sandbox.loadRepo(spec.repo, spec.signal);
      else if (spec.imageRepo) await sandbox.copyImageRepo(spec.imageRepo, spec.signal);
    } catch (err) {
      await sandbox.release();
      throw err;
    }
    this.lastSource = source;
    this.busy++;
    sandbox.onRelease(() => { this.busy--; });
    this.log.info(
      { id: sandbox.id, name, source, image, run: spec.labels.run, step: spec.labels.step, rollout: spec.labels.rollout, ms: Math.round(performance.now() - started) },
      'sandbox acquired',
    );
    return sandbox;
  }

  /** Containers ready in the warm pools and handed out to rollouts now (the metrics gauge). */
  stats(): { warm: number; busy: number } {
    let warm = 0;
    for (const p of this.pools.values()) warm += p.available;
    return { warm, busy: this.busy };
  }

  /** Fills the pool for these limits now (at worker start) and waits until it is ready. */
  async warm(limits: SandboxConfig, image?: string): Promise<void> {
    const pool = this.poolFor(image ?? limits.image ?? this.image, limits);
    pool?.fill();
    await pool?.settled();
  }

  /** Tries again to remove the containers whose removal failed; returns how many are still left. */
  async removeLeftovers(): Promise<number> {
    for (const [id, c] of [...this.leftovers]) {
      try {
        await removeContainer(c);
        this.leftovers.delete(id);
        this.log.info({ id }, 'removed a sandbox whose removal had failed');
      } catch {
        // Still refused: the next pass tries again.
      }
    }
    return this.leftovers.size;
  }

  /** Removes a container now, or keeps it for removeLeftovers when dockerd refuses. */
  private async removeOrKeep(c: Docker.Container): Promise<void> {
    try {
      await removeContainer(c);
    } catch (err) {
      this.log.warn({ id: c.id, err: String(err) }, 'could not remove a container; retried later');
      this.leftovers.set(c.id, c);
    }
  }

  /** Removes every warm container; sandboxes already handed out stay theirs to release. */
  async close(): Promise<void> {
    const pools = [...this.pools.values()];
    this.pools.clear();
    await Promise.all(pools.map((p) => p.close()));
  }

  private poolFor(image: string, limits: SandboxConfig): WarmPool<Docker.Container> | undefined {
    if (limits.warm_pool_size <= 0) return undefined;
    const key = poolKey(image, limits);
    let pool = this.pools.get(key);
    if (!pool) {
      pool = new WarmPool({
        size: limits.warm_pool_size,
        create: async () => {
          const lifetimeS = (limits.max_lifetime_s ?? DEFAULT_MAX_LIFETIME_S) + POOL_IDLE_S;
          const c = await this.createStarted(image, limits, { ...this.baseLabels(), [LABELS.pool]: 'warm' }, `ratchet-pool-${randomBytes(4).toString('hex')}`, undefined, lifetimeS);
          this.warmSince.set(c.id, performance.now());
          return c;
        },
        destroy: (c) => { this.warmSince.delete(c.id); return this.removeOrKeep(c); },
        log: this.log,
      });
      this.pools.set(key, pool);
    }
    return pool;
  }

  private idleTooLong(c: Docker.Container): boolean {
    const since = this.warmSince.get(c.id);
    if (since !== undefined && performance.now() - since > POOL_IDLE_S * 1000) {
      this.warmSince.delete(c.id);
      return true;
    }
    return false;
  }

  private baseLabels(): Record<string, string> {
    return { [LABELS.worker]: this.workerId, [LABELS.created]: new Date().toISOString() };
  }

  private async createStarted(
    image: string,
    limits: SandboxLimits,
    labels: Record<string, string>,
    name: string,
    signal?: AbortSignal,
    lifetimeS?: number,
  ): Promise<Docker.Container> {
    if (limits.disk_mb + TMP_MB >= limits.memory_mb) {
      // tmpfs pages are charged to the container's memory: a full disk would OOM-kill instead of ENOSPC.
      this.log.warn({ disk_mb: limits.disk_mb, memory_mb: limits.memory_mb }, `sandbox.disk_mb + ${TMP_MB} MiB of /tmp should stay below sandbox.memory_mb`);
    }
    let container: Docker.Container;
    try {
      container = await this.docker.createContainer(buildCreateOptions({ image, limits, labels, name, ...(lifetimeS !== undefined ? { lifetimeS } : {}) }));
    } catch (err) {
      throw explainDockerError(err, image);
    }
    try {
      if (signal?.aborted) throw new AbortError();
      await container.start();
      if (signal?.aborted) throw new AbortError();
    } catch (err) {
      await this.removeOrKeep(container);
      throw err;
    }
    return container;
  }
}

function explainDockerError(err: unknown, image: string): Error {
  const e = err as { statusCode?: number; code?: string; message?: string };
  if (e.statusCode === 404) {
    return new Error(`sandbox image ${image} not found in dockerd. Fix: bash infra/docker.sh setup (builds it), or set sandbox.image`);
  }
  if (e.code === 'ENOENT' || e.code === 'ECONNREFUSED' || e.code === 'EACCES') {
    return new Error(`cannot reach dockerd (${e.code}: ${e.message}). Fix: bash infra/docker.sh setup (starts it), or set DOCKER_HOST`);
  }
  return err instanceof Error ? err : new Error(String(err));
}
