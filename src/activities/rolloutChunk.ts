/**
 * The rollout worker's `rolloutChunk` activity (issue 24): one activity runs a chunk of
 * a step's rollouts at once. Its input is small (the step manifest's reference and a
 * range); each rollout runs through the one per-rollout code path
 * (createRolloutActivities' runOne: episode, scoring, the trajectory written at once).
 *
 * Per-rollout durability: every finished rollout is named in the heartbeat details at
 * once, so a retried attempt (a dead worker, a heartbeat timeout) runs only the rollouts
 * still missing. A rollout that fails lets its chunk-mates finish first; the chunk then
 * fails with the rollout's failure (the most serious of them: a bad task, then a full
 * disk, then the store, then anything retryable), carrying the finished rollouts in the
 * failure's details, so StepRollouts' next call of the chunk (after a disk or store wait,
 * or a round that put inference back) passes them in `done` and they are not run again.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { runKeys } from '../artifacts/keys';
import type { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import { asActivityFailure, storeFor, storeForRef } from '../artifacts/stores';
import { fromNewerBuild, newerBuildIssues } from '../config/skew';
import type { ChunkProgress, ChunkRolloutDone, RolloutChunkInput, RolloutChunkResult } from '../contracts/chunks';
import { SUMMARY_BYTES_MAX, TEMPORAL_LIMITS } from '../config/fanout';
import { StepManifest, rolloutInputOf } from '../contracts/manifest';
import type { RolloutInput } from '../contracts/rollout';
import type { RolloutSummary } from '../contracts/trajectory';
import type { Liveness } from '../shared/liveness';
import { componentLogger } from '../shared/logger';
import { withLiveness } from './liveness';
import { createHash } from 'node:crypto';
import { findStoredTrajectory, summaryOfStored } from '../rollouts/record';
import { RolloutSlots } from '../rollouts/slots';

const log = componentLogger('rollout-chunk');

export interface ChunkDeps {
  store: ArtifactStore;
  /** One rollout, through the per-rollout code path, under the chunk's liveness; `attempt` is the rollout's own try. */
  runOne: (input: RolloutInput, live: Liveness, attempt: number) => Promise<RolloutSummary>;
  /** The worker's rollout slots (shared with single `rollout` activities, src/rollouts/slots.ts); absent: no limit but the chunk's size. */
  slots?: RolloutSlots;
}

/** A finished rollout is in a heartbeat within this long (sooner than the liveness tick; a chunk done sooner sends none). */
export const BEAT_SOON_MS = 500;

/** Manifests a worker read, by sha256: a step's chunks all read the same one. */
const MANIFESTS_KEPT = 8;

/** Severity of a rollout's failure for the chunk's own: the chunk fails with the most serious. */
function severity(err: unknown): number {
  const f = err as { type?: string; nonRetryable?: boolean };
  // The host is out of service: the chunk's retry must go to another one, whatever else failed here.
  if (f?.type === 'RolloutHostUnhealthy') return 2.5;
  if (f?.type === 'DiskFull') return 2;
  if (f?.type === 'StoreUnavailable') return 1;
  if (f?.type === 'InferenceUnavailable') return 0.5;
  if (f?.nonRetryable) return 3;
  return 0;
}

export function createChunkActivity(deps: ChunkDeps) {
  const manifests = new Map<string, Promise<StepManifest>>();
  const manifestOf = (ref: ArtifactRef, input: RolloutChunkInput): Promise<StepManifest> => {
    let m = manifests.get(ref.sha256);
    if (!m) {
      m = storeForRef(ref, input.artifacts, deps.store).getJson(ref).then((raw) => {
        const parsed = StepManifest.safeParse(raw);
        if (parsed.success) return parsed.data;
        const newer = newerBuildIssues(parsed.error);
        throw newer ? fromNewerBuild(`the step manifest ${ref.uri}`, newer) : parsed.error;
      });
      m.catch(() => manifests.delete(ref.sha256));
      manifests.set(ref.sha256, m);
      if (manifests.size > MANIFESTS_KEPT) manifests.delete(manifests.keys().next().value!);
    }
    return m;
  };

  async function rolloutChunk(input: RolloutChunkInput): Promise<RolloutChunkResult> {
    // The heartbeat and a failure's details name every finished rollout: each summary is bounded
    // (boundedSummary), so the range bounds them, under Temporal's payload limit.
    if ((input.end - input.start) * SUMMARY_BYTES_MAX > TEMPORAL_LIMITS.payloadBytes / 2) {
      throw ApplicationFailure.nonRetryable(`chunk [${input.start}, ${input.end}) has ${input.end - input.start} rollouts: their summaries in one heartbeat could exceed half of Temporal's ` +
        `${TEMPORAL_LIMITS.payloadBytes}-byte payload limit. Fix: lower orchestrator.rollouts_per_chunk`, 'InvalidRolloutInput');
    }
    let manifest: StepManifest;
    try {
      manifest = await manifestOf(input.manifest, input);
    } catch (err) {
      throw asActivityFailure(err);
    }
    let ctx: Context | undefined;
    try { ctx = Context.current(); } catch { ctx = undefined; }
    // What is done already: passed in by StepRollouts, or heartbeated by an earlier attempt of this call.
    const done = new Map<number, RolloutSummary>();
    for (const d of input.done ?? []) done.set(d.i, d.summary);
    const beat = ctx?.info.heartbeatDetails as ChunkProgress | undefined;
    for (const d of beat?.done ?? []) if (d.i >= input.start && d.i < input.end) done.set(d.i, d.summary);
    // Each rollout's tries in this call so far (earlier attempts' heartbeats): its attempt is its own, not the chunk's.
    const tries = new Map<number, number>();
    for (const t of beat?.tries ?? []) if (t.i >= input.start && t.i < input.end) tries.set(t.i, t.n);
    const clog = log.child({ run: manifest.runId, step: manifest.step, start: input.start, end: input.end, attempt: ctx?.info.attempt });
    // A later attempt (or a later call after a wait) also adopts rollouts an earlier attempt finished and
    // stored but never managed to name: heartbeats are throttled, so a worker killed just after a rollout
    // finished may have sent no beat for it. A first call has nothing to find and skips the listing.
    if ((ctx?.info.attempt ?? 1) > 1 || input.done !== undefined) {
      try {
        const adopted = await adoptStoredRollouts(storeFor(input.artifacts, deps.store), manifest, input, done);
        if (adopted.length) clog.info({ adopted }, 'chunk: rollouts an earlier attempt stored are adopted, not run again');
      } catch (err) {
        throw asActivityFailure(err);
      }
    }
    const missing: number[] = [];
    for (let i = input.start; i < input.end; i++) if (!done.has(i)) missing.push(i);
    if (done.size) clog.info({ done: done.size, missing: missing.length }, 'chunk resumed: only the missing rollouts run');

    const progressOf = (): ChunkProgress => {
      const open = [...tries].filter(([i]) => !done.has(i)).map(([i, n]) => ({ i, n }));
      return { done: [...done].map(([i, summary]): ChunkRolloutDone => ({ i, summary })), ...(open.length ? { tries: open } : {}) };
    };
    const failures: { i: number; err: unknown }[] = [];
    const windows = manifest.liveness;
    // Beats that carry finished rollouts, coalesced over BEAT_SOON_MS: a chunk that ends sooner costs
    // the server no heartbeat write at all (its result carries them), a long one names each within a
    // moment. The SDK sends a first beat at once and throttles the rest.
    let soon: NodeJS.Timeout | undefined;
    const beatNow = () => {
      if (soon) clearTimeout(soon);
      soon = undefined;
      try { ctx?.heartbeat(progressOf()); } catch { /* the next tick */ }
    };
    const beatSoon = () => { soon ??= setTimeout(beatNow, BEAT_SOON_MS); };
    await withLiveness({ name: 'rollout-chunk', heartbeatEveryMs: windows.heartbeat_every_s * 1000, stallMs: windows.stall_s * 1000, logger: clog, beatAtStart: false }, async (live) => {
      // The heartbeat carries the finished rollouts; a rollout's own progress only keeps the chunk alive.
      const progress = () => live.progress(progressOf() as unknown as Record<string, unknown>);
      progress();
      // A resumed attempt names what is done already in its first beat; no beat leaves the earlier
      // attempt's details in place (never bare 'started' details: the next attempt would run everything again).
      if (done.size) beatNow();
      const child: Liveness = { progress: () => progress(), signal: live.signal, get stalled() { return live.stalled; } };
      // A rollout queued for a slot is not hung: while any is, the chunk counts as moving. The worker admitted
      // this chunk with one slot free (src/rollouts/slots.ts), so one rollout at least runs from the start.
      let queued = 0;
      const queueTick = setInterval(() => { if (queued > 0) progress(); }, windows.heartbeat_every_s * 1000);
      // The run's own cap (orchestrator.max_concurrent_rollouts) inside the chunk, on the worker's slots.
      const lease = (deps.slots ?? new RolloutSlots(Infinity)).open(Math.min(manifest.maxConcurrentRollouts ?? missing.length, missing.length));
      await Promise.all(missing.map(async (i) => {
        const run = () => {
          queued--;
          const attempt = (tries.get(i) ?? 0) + 1;
          tries.set(i, attempt);
          return deps.runOne(rolloutInputOf(manifest, i), child, attempt);
        };
        queued++;
        try {
          const summary = await lease.run(run);
          done.set(i, summary);
          progress();
          // Within BEAT_SOON_MS, not at the next tick: a worker killed later loses no finished rollout.
          beatSoon();
        } catch (err) {
          failures.push({ i, err });
        }
      })).finally(() => {
        clearInterval(queueTick);
        lease.close();
      });
    }).finally(() => { if (soon) clearTimeout(soon); });

    if (failures.length) {
      // The finished ones, for this call's Temporal retry (which reads the last beat; the SDK sends a pending one with the failure).
      if (done.size) beatNow();
      const worst = failures.reduce((a, b) => (severity(b.err) > severity(a.err) ? b : a));
      const e = worst.err as ApplicationFailure & Error;
      clog.warn({ failed: failures.map((f) => f.i), done: done.size, type: e.type, err: e.message }, 'chunk: some rollouts failed; the finished ones are kept');
      throw ApplicationFailure.create({
        type: e.type ?? e.name ?? 'RolloutFailed',
        message: `${failures.length} of ${input.end - input.start} rollouts of chunk [${input.start}, ${input.end}) failed; rollout ${worst.i}: ${e.message}`,
        // Inference not answering: StepRollouts waits for it at once (the same server would keep every retry waiting).
        nonRetryable: e instanceof ApplicationFailure ? e.nonRetryable === true || e.type === 'InferenceUnavailable' : false,
        details: [progressOf()],
      });
    }

    const summaries = Array.from({ length: input.end - input.start }, (_, k) => done.get(input.start + k)!);
    try {
      const text = JSON.stringify(summaries);
      const key = runKeys.rolloutChunk(manifest.runId, manifest.step, input.start, createHash('sha256').update(text).digest('hex'));
      const ref = await storeFor(input.artifacts, deps.store).putJson(key, summaries);
      return { summaries: ref, count: summaries.length, ran: missing.length };
    } catch (err) {
      // The store is down or the disk full at the very end: the rollouts are done and travel in the details
      // (and in a last beat, for this call's Temporal retry).
      beatNow();
      const f = asActivityFailure(err);
      if (f instanceof ApplicationFailure) throw ApplicationFailure.create({ type: f.type ?? 'StoreUnavailable', message: f.message, nonRetryable: f.nonRetryable === true, details: [progressOf()] });
      throw f;
    }
  }

  return { rolloutChunk };
}

/**
 * Rollouts of the chunk not yet in `done` whose trajectory an earlier attempt stored: their summaries
 * are rebuilt from the stored trajectory and added to `done`. Returns the indices adopted.
 */
export async function adoptStoredRollouts(
  store: ArtifactStore, manifest: StepManifest, input: Pick<RolloutChunkInput, 'start' | 'end'>, done: Map<number, RolloutSummary>,
): Promise<number[]> {
  const adopted: number[] = [];
  const listings = new Map<string, Promise<string[]>>(); // one listing per group (a group's rollouts share a directory)
  for (let i = input.start; i < input.end; i++) {
    if (done.has(i)) continue;
    const r = rolloutInputOf(manifest, i);
    const dir = runKeys.rolloutGroup(r.runId, r.step, r.groupId);
    if (!listings.has(dir)) listings.set(dir, store.list(dir));
    const found = await findStoredTrajectory(store, r.runId, r.step, r.groupId, r.rolloutIndex, await listings.get(dir)!);
    if (!found) continue;
    done.set(i, summaryOfStored(found.trajectory, found.ref, r.policyVersion));
    adopted.push(i);
  }
  return adopted;
}
