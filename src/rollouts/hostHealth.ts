/**
 * A rollout host that cannot run rollouts takes itself out of service (issue 39): its sandboxes
 * cannot start (dockerd down or restarting, the sandbox image pruned, Docker's disk full) or its
 * task files cannot be read. Every chunk sent to it would fail fast, so the worker stops polling
 * (src/workers/rollout.ts) until a health probe passes, and says so: in its log and in a record in
 * the shared store that the run's watchdog reads (waiting-for-healthy-rollout-hosts, naming the
 * host and the error, when no worker is left polling).
 */
import { access, constants } from 'node:fs/promises';
import { z } from 'zod';
import type { ArtifactRef } from '../artifacts/ref';
import { ArtifactIntegrityError } from '../artifacts/store';
import type { UnhealthyRolloutHost } from '../contracts/step';

/** Why this host cannot run rollouts, read from a rollout's failure; undefined when the failure is not the host's. */
export function hostFaultOf(err: unknown): string | undefined {
  const e = err as { type?: string; message?: string } | undefined;
  const m = e?.message ?? String(err);
  if (e?.type === 'TaskReadError') return m;
  if (/cannot reach dockerd|Cannot connect to the Docker daemon|connect (ECONNREFUSED|ENOENT) .*docker\.sock|sandbox image .* not found in dockerd|No such image|no space left on device/i.test(m)) return m;
  return undefined;
}

/** What the probe checks again: the images and task files the failures named. */
export interface HostProbeTargets {
  images: Set<string>;
  taskFiles: Set<string>;
}

/** The worker's health: sick from the first host fault until the probe passes. Shared by its activities. */
export class HostHealth {
  private sickSince: { error: string; since: string } | undefined;
  private readonly listeners: ((error: string) => void)[] = [];
  readonly targets: HostProbeTargets = { images: new Set(), taskFiles: new Set() };

  /** A rollout met a host fault: the first one takes the worker out of service. */
  markSick(error: string, target: { image?: string; taskFile?: string } = {}): void {
    if (target.image) this.targets.images.add(target.image);
    if (target.taskFile) this.targets.taskFiles.add(target.taskFile);
    if (this.sickSince) return;
    this.sickSince = { error, since: new Date().toISOString() };
    for (const l of this.listeners) l(error);
  }

  markHealthy(): void {
    this.sickSince = undefined;
    this.targets.images.clear();
    this.targets.taskFiles.clear();
  }

  get sick(): { error: string; since: string } | undefined {
    return this.sickSince;
  }

  onSick(fn: (error: string) => void): () => void {
    this.listeners.push(fn);
    return () => { this.listeners.splice(this.listeners.indexOf(fn), 1); };
  }
}

/** The part of dockerode the probe uses. */
export interface ProbeDocker {
  ping(): Promise<unknown>;
  getImage(name: string): { inspect(): Promise<unknown> };
}

/** Undefined when the host can run rollouts again; else what is still wrong (with its fix). */
export async function probeHost(docker: ProbeDocker, defaultImage: string, targets: HostProbeTargets, timeoutMs = 10_000): Promise<string | undefined> {
  const within = <T>(what: string, p: Promise<T>): Promise<T> => Promise.race([
    p, new Promise<T>((_, reject) => setTimeout(() => reject(new Error(`${what}: no answer within ${timeoutMs} ms`)), timeoutMs).unref()),
  ]);
  try {
    await within('docker ping', docker.ping());
  } catch (err) {
    return `cannot reach dockerd: ${(err as Error).message}. Fix: start dockerd (bash infra/docker.sh setup), or set DOCKER_HOST`;
  }
  for (const image of new Set([defaultImage, ...targets.images])) {
    try {
      await within(`docker image inspect ${image}`, docker.getImage(image).inspect());
    } catch (err) {
      return `sandbox image ${image} is not on this host: ${(err as Error).message}. Fix: bash infra/docker.sh setup (builds it), or docker pull it`;
    }
  }
  for (const file of targets.taskFiles) {
    try {
      await access(file, constants.R_OK);
    } catch (err) {
      return `task file ${file} cannot be read: ${(err as Error).message}. Fix: copy the task set to this host (the same path as on the main host)`;
    }
  }
  return undefined;
}

/** A worker's health record in the shared store (`workers/health/<worker id>.json`), rewritten at each probe. */
export const HostHealthRecord = z.object({
  workerId: z.string(),
  host: z.string(),
  healthy: z.boolean(),
  error: z.string().optional(),
  since: z.string().optional(),
  checkedAt: z.string(),
});
export type HostHealthRecord = z.infer<typeof HostHealthRecord>;

export const HEALTH_PREFIX = 'workers/health';
/** A record not rewritten for this long is of a worker that is gone: not named. */
export const HEALTH_RECORD_FRESH_MS = 5 * 60_000;

export function healthKey(workerId: string): string {
  return `${HEALTH_PREFIX}/${workerId.replace(/[^a-zA-Z0-9_.-]/g, '_')}.json`;
}

export interface HealthBackend {
  putJson(key: string, value: unknown): Promise<ArtifactRef>;
  exists(key: string): Promise<ArtifactRef | undefined>;
  getJson<T = unknown>(ref: ArtifactRef): Promise<T>;
  list(prefix: string): Promise<string[]>;
}

/** Tries at one record that its worker keeps rewriting (a sick worker refreshes its record every few seconds). */
const RECORD_READ_TRIES = 5;

/**
 * One worker's record, or undefined when it is gone or not a record. A record rewritten between exists()
 * and getJson() fails getJson's sha256 check: it is read again, not skipped. Skipped, a sick host vanished
 * from one check's view, and the watch (RolloutWorkersWait) took that for a change and handed off again.
 */
async function readHealthRecord(store: HealthBackend, key: string): Promise<HostHealthRecord | undefined> {
  for (let tries = 1; ; tries++) {
    const ref = await store.exists(key);
    if (!ref) return undefined;
    try {
      return HostHealthRecord.parse(await store.getJson(ref));
    } catch (err) {
      if (!(err instanceof ArtifactIntegrityError) || tries >= RECORD_READ_TRIES) return undefined;
    }
  }
}

/** The hosts out of service now, from their records: fresh and not healthy, oldest first. */
export async function unhealthyHosts(store: HealthBackend, now = Date.now()): Promise<UnhealthyRolloutHost[]> {
  const out: (UnhealthyRolloutHost & { at: number })[] = [];
  for (const key of await store.list(HEALTH_PREFIX)) {
    const rec = await readHealthRecord(store, key);
    if (!rec || rec.healthy || now - Date.parse(rec.checkedAt) > HEALTH_RECORD_FRESH_MS) continue;
    out.push({ host: rec.host, error: rec.error ?? 'unknown', since: rec.since ?? rec.checkedAt, at: Date.parse(rec.since ?? rec.checkedAt) });
  }
  return out.sort((a, b) => a.at - b.at).map(({ at: _at, ...h }) => h);
}
