/**
 * A step's rollouts in chunks (issue 24): the chunk runner, and RolloutShard, the child
 * workflow that runs one shard of a step's chunks. StepRollouts (./stepRollouts.ts) runs a
 * step of at most `chunks_per_shard` chunks with the runner itself and starts one
 * RolloutShard per `chunks_per_shard` chunks for a larger one, so no execution holds more
 * than its window of activities in flight; a shard continues as new before its history
 * reaches SHARD_EVENTS_BEFORE_CONTINUE events. Summaries travel up as artifacts: a chunk
 * returns one ref, a shard joins its chunks' into one, StepRollouts joins the shards'.
 *
 * A chunk activity (`rolloutChunk` on ratchet-rollout) gets the step manifest's reference
 * and a range. A full disk or an unreachable store waits (waiting-for-disk /
 * waiting-for-store) and calls the chunk again with what it finished (the failure's
 * details), handed to OutageWait when long; a chunk whose retries ran out puts inference
 * back (one shared wait, handed to InferenceWait when long) and runs again, up to
 * MAX_ROUNDS; no rollout running and no rollout worker polling shows
 * waiting-for-rollout-workers. Every status reaches TrainRun: a shard signals
 * StepRollouts, which forwards what changed.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  TimeoutFailure,
  condition,
  continueAsNew,
  getExternalWorkflowHandle,
  log,
  patched,
  proxyActivities,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import type { MainActivities } from '../contracts/activities';
import { SHARD_EVENTS_BEFORE_CONTINUE } from '../config/fanout';
import {
  chunkRange,
  type ChunkActivities, type ChunkProgress, type RolloutChunkInput, type RolloutChunkResult,
  type RolloutShardInput, type RolloutShardResult, type ShardStatusSignal, type StepChunksContext,
} from '../contracts/chunks';
import type { OutageType } from '../contracts/outage';
import type { SyncWeightsInput } from '../contracts/weightSync';
import { syncAllHosts } from './weightSync';
import { shardStatusSignal } from './messages';
import { PATCHES } from './patches';
import { ROLLOUT_TASK_QUEUE, SUMMARIES_OPTIONS, chunkOptions, rolloutWorkersSeen, storeRolloutSummaries } from './proxies';
import { DEFAULT_HANDOFF_AFTER, callOf, capFor, handOff, outageOf } from './outageWait';
import { INFERENCE_WAIT_CAP_S, handOffInferenceWait, inferenceDown } from './inferenceWait';
import { waitForStore, type OutageWaiter } from './storeWait';
import { handOffRolloutWorkersWait, noRolloutWorker } from './rolloutWorkersWait';
import { boundedHosts, type UnhealthyRolloutHost } from '../contracts/step';

/** Rounds of (the chunk's retries, then make sure inference serves the step's version) before the step fails. */
const MAX_ROUNDS = 30;
/** Seconds without a finished chunk before the watchdog asks whether rollout workers are alive. */
const WATCH_S = 120;
/** Checks in a row that found no rollout worker before the wait goes to a RolloutWorkersWait child. */
const WATCH_HANDOFF_AFTER = 3;
/** With workers alive and no chunk finishing, the checks back off to WATCH_S times this. */
const WATCH_BACKOFF = 16;

export interface Waits {
  waitingForInference: boolean; waitingForDisk: boolean; waitingForStore: boolean; waitingForRolloutWorkers: boolean;
  /** With waitingForRolloutWorkers: the hosts out of service (boundedHosts), absent when none said so. */
  unhealthyRolloutHosts?: UnhealthyRolloutHost[];
}
type WaitFlag = Exclude<keyof Waits, 'unhealthyRolloutHosts'>;
export const NO_WAITS: Waits = { waitingForInference: false, waitingForDisk: false, waitingForStore: false, waitingForRolloutWorkers: false };

/** The finished rollouts a failed chunk carries in its details (rolloutChunk puts them there). */
function progressOf(err: unknown): ChunkProgress | undefined {
  if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure)) return undefined;
  const d = err.cause.details?.[0] as ChunkProgress | undefined;
  return d && Array.isArray(d.done) ? d : undefined;
}

/** The finished rollouts a chunk that timed out named in its last heartbeat. */
function timedOutProgressOf(err: unknown): ChunkProgress | undefined {
  if (!(err instanceof ActivityFailure && err.cause instanceof TimeoutFailure)) return undefined;
  const d = err.cause.lastHeartbeatDetails as ChunkProgress | undefined;
  return d && Array.isArray(d.done) ? d : undefined;
}

/** What an earlier call finished and what this one adds, by rollout index (the later wins). */
function mergeDone(a: ChunkProgress['done'] | undefined, b: ChunkProgress['done'] | undefined): ChunkProgress['done'] {
  const m = new Map<number, ChunkProgress['done'][number]>();
  for (const d of [...(a ?? []), ...(b ?? [])]) m.set(d.i, d);
  return [...m.values()].sort((x, y) => x.i - y.i);
}

/**
 * The chunk's next call after a failed one: what the failure's details (or, for a timeout, its last
 * heartbeat) name as finished is passed in `done`, so only the rest runs. `keepTimedOut` is asked only
 * for a failure without details (patch v0.8-chunk-timeout-keeps-done: before it, a round that ended in
 * a timeout ran its finished rollouts again).
 */
export function afterFailedCall(req: RolloutChunkInput, err: unknown, keepTimedOut: () => boolean): RolloutChunkInput {
  const progress = progressOf(err);
  if (progress) return { ...req, done: progress.done };
  // A timeout carries no failure details, only the last heartbeat's; and a call with `done` set lists the
  // store for rollouts an earlier call stored but never named (heartbeats are throttled).
  if (keepTimedOut()) return { ...req, done: mergeDone(req.done, timedOutProgressOf(err)?.done) };
  return req;
}

/** A chunk's failure of this type, after its Temporal retries (rolloutChunk names the worst of its rollouts'). */
const failedWith = (err: unknown, type: string): boolean =>
  err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === type;

/**
 * Runs chunks [first, end) of the step with `window` in flight; `report` hears the done count
 * (at most ~8 times) and every change of a wait. Stops starting chunks once `stopAt()` says so,
 * and returns the summaries of the chunks it finished, which are always [first, first + n).
 */
export async function runChunks(
  ctx: StepChunksContext, first: number, end: number, window: number,
  report: (done: number, waits: Waits) => Promise<void>, stopAt: () => boolean, doneBefore: number,
): Promise<{ parts: ArtifactRef[]; done: number }> {
  const options = chunkOptions(ctx.runId, ctx.fairnessWeight, ctx.rolloutHeartbeat);
  const { rolloutChunk } = proxyActivities<ChunkActivities>(options);
  const parts: ArtifactRef[] = [];
  const waits: Waits = { ...NO_WAITS };
  let done = doneBefore;
  let next = first;
  const chunks = end - first;
  const stride = Math.max(1, Math.ceil(chunks / 8));
  let chunksDone = 0;
  const set = async (key: WaitFlag, on: boolean): Promise<void> => {
    if (waits[key] === on) return;
    waits[key] = on;
    if (key === 'waitingForRolloutWorkers' && !on) delete waits.unhealthyRolloutHosts;
    await report(done, { ...waits });
  };
  /** The rollout-worker wait, naming the hosts out of service (if any said so): reported when either changes. */
  const setNoWorkers = async (none: boolean, hosts: UnhealthyRolloutHost[] | undefined): Promise<void> => {
    const named = none && hosts?.length ? boundedHosts(hosts) : undefined;
    if (waits.waitingForRolloutWorkers === none && JSON.stringify(named) === JSON.stringify(waits.unhealthyRolloutHosts)) return;
    waits.waitingForRolloutWorkers = none;
    if (named) waits.unhealthyRolloutHosts = named; else delete waits.unhealthyRolloutHosts;
    await report(done, { ...waits });
  };
  // Chunks in a disk or store wait now: the status holds while any does.
  const onDisk = new Set<number>();
  const onStore = new Set<number>();
  const waitStarts = async (c: number, fault: OutageType) => {
    (fault === 'DiskFull' ? onDisk : onStore).add(c);
    await set(fault === 'DiskFull' ? 'waitingForDisk' : 'waitingForStore', true);
  };
  // Chunks whose inference stopped answering (chunkInferenceUnavailable): waiting-for-inference holds while any does.
  const onInference = new Set<number>();
  const waitEnds = async (c: number) => {
    if (onDisk.delete(c) && onDisk.size === 0) await set('waitingForDisk', false);
    if (onStore.delete(c) && onStore.size === 0) await set('waitingForStore', false);
    if (onInference.delete(c) && onInference.size === 0 && !serving) await set('waitingForInference', false);
  };

  // Inference: one wait for every chunk that asks meanwhile.
  const syncRequest = (): SyncWeightsInput => ({
    runId: ctx.runId, baseUrls: ctx.baseUrls, policyVersion: ctx.policyVersion, adapter: ctx.adapter, keepFromVersion: ctx.keepFromVersion,
    liveness: ctx.weightSyncLiveness, artifacts: ctx.artifacts,
    ...(ctx.syncQuorum !== undefined ? { quorum: ctx.syncQuorum } : {}),
    ...(ctx.full ? { full: true, ...(ctx.full.checkpoint ? { checkpoint: ctx.full.checkpoint } : {}) } : {}),
  });
  let serving: Promise<void> | undefined;
  let inferenceHandoffs = 0;
  let outageHandoffs = 0;
  const serve = async (): Promise<void> => {
    const hosts = ctx.syncTaskQueues;
    const limits = ctx.outageWaits;
    for (let wait = 5, failed = 0; ; wait = Math.min(wait * 2, limits?.capS ?? INFERENCE_WAIT_CAP_S)) {
      try {
        await syncAllHosts(syncRequest(), hosts);
        if (onInference.size === 0) await set('waitingForInference', false);
        return;
      } catch (err) {
        if (!inferenceDown(err, hosts)) throw err;
        await set('waitingForInference', true);
        if (++failed >= (limits?.handoffAfter ?? DEFAULT_HANDOFF_AFTER)) {
          await handOffInferenceWait(syncRequest(), hosts, wait, limits, inferenceHandoffs++);
          if (onInference.size === 0) await set('waitingForInference', false);
          return;
        }
        await sleep(`${wait} seconds`);
      }
    }
  };
  const ensureServed = (): Promise<void> => {
    serving ??= serve().finally(() => { serving = undefined; });
    return serving;
  };

  const runChunk = async (c: number): Promise<RolloutChunkResult> => {
    const { start, end: stop } = chunkRange(c, ctx.perChunk, ctx.total);
    let req: RolloutChunkInput = { manifest: ctx.manifest, start, end: stop, ...(ctx.artifacts ? { artifacts: ctx.artifacts } : {}) };
    const handoffAfter = ctx.outageWaits?.handoffAfter ?? DEFAULT_HANDOFF_AFTER;
    for (let round = 1, wait = 2, tries = 0, fault: OutageType = 'DiskFull'; ; round++) {
      try {
        const r = tries >= handoffAfter
          ? await handOff<RolloutChunkResult>(callOf<ChunkActivities, 'rolloutChunk'>(options, 'rolloutChunk', req), fault, wait, ctx.outageWaits, outageHandoffs++)
          : await rolloutChunk(req);
        if (onDisk.has(c) || onStore.has(c) || onInference.has(c)) await waitEnds(c);
        return r;
      } catch (err) {
        // What the chunk finished stays finished: the next call runs only the rest.
        req = afterFailedCall(req, err, () => patched(PATCHES.chunkTimeoutKeepsDone));
        // The worker took itself out of service (its sandboxes cannot start, its task files cannot be read):
        // the chunk goes to a healthy host, or waits in the queue for one; no round is used.
        if (failedWith(err, 'RolloutHostUnhealthy') && patched(PATCHES.rolloutHostHealth)) {
          log.warn('a chunk met a rollout host out of service; calling it again for a healthy host', { chunk: c, error: (err as ActivityFailure).cause!.message });
          await sleep(`${Math.min(wait, 30)} seconds`);
          wait = Math.min(wait * 2, 60);
          round--;
          continue;
        }
        // The rollouts' inference server stopped answering (request deadlines, its health probe): a wait, not a round.
        if (failedWith(err, 'InferenceUnavailable') && patched(PATCHES.chunkInferenceUnavailable)) {
          log.warn('a chunk found inference not answering; waiting for it before running its missing rollouts', { chunk: c, error: (err as ActivityFailure).cause!.message });
          // Shown from now until this chunk's next call ends otherwise, through the sync and the pause after it.
          onInference.add(c);
          await set('waitingForInference', true);
          await ensureServed();
          // The sync reached every replica: the server answers its API, maybe not yet its completions. Back off.
          await sleep(`${Math.min(wait, INFERENCE_WAIT_CAP_S)} seconds`);
          wait = Math.min(wait * 2, INFERENCE_WAIT_CAP_S);
          round--;
          continue;
        }
        const outage = outageOf(err);
        if (outage) {
          log.warn('a chunk met an outage; waiting, then running its missing rollouts', { chunk: c, fault: outage, error: (err as ActivityFailure).cause!.message });
          fault = outage;
          tries++;
          if (outage === 'DiskFull') onStore.delete(c); else onDisk.delete(c);
          await waitStarts(c, outage);
          await sleep(`${wait} seconds`);
          wait = Math.min(wait * 2, capFor(outage, ctx.outageWaits));
          round--;
          continue;
        }
        if (onDisk.has(c) || onStore.has(c) || onInference.has(c)) await waitEnds(c);
        if (!(err instanceof ActivityFailure) || round >= MAX_ROUNDS) throw err;
        if (err.cause instanceof ApplicationFailure && err.cause.nonRetryable) throw err;
        log.warn('a chunk failed after its retries; checking inference before running its missing rollouts', { chunk: c, round, error: String(err.cause ?? err) });
        await ensureServed();
      }
    }
  };

  // No chunk finishing for a while: are rollout workers alive at all?
  let over = false;
  const watchdog = async (): Promise<void> => {
    const every = ctx.rolloutWorkersWatchS ?? WATCH_S;
    let tick = every;
    let seen = done;
    const info = workflowInfo();
    const knownWait = () => waits.waitingForInference || onDisk.size > 0 || onStore.size > 0;
    const ask = { workflowId: info.workflowId, runId: info.runId, taskQueue: ROLLOUT_TASK_QUEUE };
    let noneChecks = 0;
    let handoffs = 0;
    while (!over) {
      if (knownWait()) {
        await condition(() => over || !knownWait());
        seen = -1;
        continue;
      }
      if (await condition(() => over || knownWait(), `${tick} seconds`)) continue;
      if (done !== seen) {
        seen = done;
        tick = every;
        noneChecks = 0;
        continue;
      }
      try {
        let w = await rolloutWorkersSeen(ask);
        let none = noRolloutWorker(w);
        if (!patched(PATCHES.rolloutWorkersWaitChild)) {
          await set('waitingForRolloutWorkers', none);
          tick = none ? Math.min(tick * 2, every * 2) : every;
          continue;
        }
        await setNoWorkers(none, w.unhealthy);
        noneChecks = none ? noneChecks + 1 : 0;
        if (noneChecks >= WATCH_HANDOFF_AFTER) {
          // A long wait: its checks go to a child that continues as new, and this history holds one child per change.
          w = await handOffRolloutWorkersWait({
            ask, everyS: Math.min(tick * 2, every * 2), shown: w, ...(ctx.outageWaits?.perExecution ? { perExecution: ctx.outageWaits.perExecution } : {}),
          }, handoffs++);
          none = noRolloutWorker(w);
          await setNoWorkers(none, w.unhealthy);
          if (!none) noneChecks = 0;
        }
        // Workers run the chunks and none finishes (long chunks): fewer checks, each still a timer and an activity here.
        tick = Math.min(tick * 2, none ? every * 2 : every * WATCH_BACKOFF);
      } catch (err) {
        log.warn('could not ask whether rollout workers are alive', { error: String(err) });
      }
    }
  };

  // Before v0.7: `next >= end` held from the moment the last chunk started, so each chunk finishing after
  // that signalled (every chunk, in a step of one window). Histories from then replay that way.
  const strided = patched(PATCHES.chunkProgressStride);
  let reported = doneBefore;
  const lane = async (): Promise<void> => {
    while (next < end && !stopAt()) {
      const c = next++;
      const r = await runChunk(c);
      parts[c - first] = r.summaries;
      done += r.count;
      if (waits.waitingForRolloutWorkers) await set('waitingForRolloutWorkers', false);
      if (++chunksDone % stride === 0 || (strided ? chunksDone === chunks : next >= end)) {
        reported = done;
        await report(done, { ...waits });
      }
    }
  };
  const watching = chunks > 0 ? watchdog() : undefined;
  try {
    await Promise.all(Array.from({ length: Math.max(1, Math.min(window, chunks)) }, lane));
  } finally {
    over = true;
  }
  await watching;
  if (waits.waitingForRolloutWorkers) await set('waitingForRolloutWorkers', false);
  // Stopped early (a shard about to continue as new): what it finished since its last report.
  if (strided && done !== reported) await report(done, { ...waits });
  return { parts, done };
}

/** The step's summaries joined from parts (chunks' or shards'), into the step's artifact or a shard's. */
export function joinSummaries(ctx: StepChunksContext, waiter: OutageWaiter, parts: ArtifactRef[], shard?: number): Promise<ArtifactRef> {
  const req = {
    runId: ctx.runId, step: ctx.step, parts, ...(shard !== undefined ? { shard } : {}), ...(ctx.round ? { round: ctx.round } : {}),
    ...(ctx.artifacts ? { artifacts: ctx.artifacts } : {}),
  };
  return waitForStore(waiter, () => storeRolloutSummaries(req), callOf<MainActivities, 'storeRolloutSummaries'>(SUMMARIES_OPTIONS, 'storeRolloutSummaries', req));
}

export function waiterFor(ctx: StepChunksContext, show: (w: Partial<Waits>) => void): OutageWaiter {
  let store = false;
  let disk = false;
  return {
    outageLimits: ctx.outageWaits,
    outageHandoffs: 0,
    setWaitingForStore: (on) => { if (on === store) return false; store = on; show({ waitingForStore: on }); return true; },
    setWaitingForDisk: (on) => { if (on === disk) return false; disk = on; show({ waitingForDisk: on }); return true; },
  };
}

/** One shard of a step: chunks [firstChunk, endChunk), continuing as new as its history grows. */
export async function RolloutShard(input: RolloutShardInput): Promise<RolloutShardResult> {
  const parent = getExternalWorkflowHandle(input.parentWorkflowId);
  const signal = async (done: number, waits: Partial<Waits>) => {
    try {
      await parent.signal(shardStatusSignal, { shard: input.shard, done, ...waits } satisfies ShardStatusSignal);
    } catch (err) {
      log.warn('could not report shard status to StepRollouts', { error: String(err) });
    }
  };
  const carried = input.parts ?? [];
  const first = input.firstChunk + carried.length;
  const limit = input.eventsBeforeContinue ?? SHARD_EVENTS_BEFORE_CONTINUE;
  const stopAt = () => workflowInfo().historyLength >= limit || workflowInfo().continueAsNewSuggested;
  const { parts, done } = await runChunks(input.ctx, first, input.endChunk, input.window, signal, stopAt, input.done ?? 0);
  const all = [...carried, ...parts];
  if (input.firstChunk + all.length < input.endChunk) {
    log.info('shard history is growing: continuing as new', { shard: input.shard, chunksDone: all.length, historyLength: workflowInfo().historyLength });
    await continueAsNew<typeof RolloutShard>({ ...input, parts: all, done, eventsBefore: (input.eventsBefore ?? 0) + workflowInfo().historyLength });
  }
  let lastWaits: Partial<Waits> = {};
  const summaries = await joinSummaries(input.ctx, waiterFor(input.ctx, (w) => { lastWaits = { ...lastWaits, ...w }; void signal(done, lastWaits); }), all, input.shard);
  return { summaries, count: done, events: (input.eventsBefore ?? 0) + workflowInfo().historyLength };
}
