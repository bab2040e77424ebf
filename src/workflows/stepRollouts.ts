/**
 * StepRollouts: one step's rollouts as a child of TrainRun, so the parent's
 * history grows by a handful of events per step however many rollouts there are.
 * A sliding window keeps at most `maxConcurrent` rollout activities pending
 * (far below Temporal's 2,000), and the parent hears progress per finished group.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  condition,
  deprecatePatch,
  getExternalWorkflowHandle,
  log,
  patched,
  proxyActivities,
  sleep,
  workflowInfo,
} from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import type { RolloutSummary } from '../contracts/trajectory';
import type { MainActivities, RolloutActivities, RolloutInput } from '../contracts';
import { rolloutSeed } from '../contracts/chunks';
import { chunkedStepRollouts } from './stepChunks';
import { SUMMARIES_PER_PART, type StepRolloutsInput, type StepRolloutsResult } from '../contracts/step';
import { forActivity, livenessOf } from '../shared/liveness';
import { syncQuorum } from '../shared/replicas';
import { rolloutProgressSignal } from './messages';
import { DEPRECATED_PATCHES, PATCHES } from './patches';
import { ROLLOUT_TASK_QUEUE, SUMMARIES_OPTIONS, rolloutOptions, rolloutWorkersSeen, storeRolloutSummaries } from './proxies';
import type { OutageType } from '../contracts/outage';
import { DEFAULT_HANDOFF_AFTER, DISK_WAIT_CAP_S, STORE_WAIT_CAP_S, callOf, handOff, outageOf } from './outageWait';
import { waitForStore, type OutageWaiter } from './storeWait';
import { syncAllHosts } from './weightSync';
import { INFERENCE_WAIT_CAP_S, handOffInferenceWait, inferenceDown } from './inferenceWait';

/** Seconds without a finished rollout before the watchdog asks whether rollout workers are alive. */
export const ROLLOUT_WORKERS_WATCH_S = 120;

/** Rounds of (retry the rollout, then make sure inference serves its version) before giving up. */
const MAX_ROUNDS = 30;

export { rolloutSeed };

export async function StepRollouts(input: StepRolloutsInput): Promise<StepRolloutsResult> {
  // A manifest by reference: the rollouts run in chunks over shards (stepChunks.ts). Only TrainRun's
  // v0.6-step-manifest path sends one, so an older history never reaches this patched().
  if (input.manifest && patched(PATCHES.stepChunks)) {
    return chunkedStepRollouts({ ...input, manifest: input.manifest, taskCount: input.taskCount ?? 0 });
  }
  // The pre-0.6 per-rollout window below: only a run configured with rollouts_per_chunk = 0 reaches it (refused for
  // new runs since 0.8; no shipped config had it). It goes once the tests and histories that pin it move to chunks
  // (docs/upgrades.md, "The per-rollout fan-out").
  const perTask = input.config.orchestrator.rollouts_per_example;
  const total = input.tasks.length * perTask;
  const window = Math.min(input.config.orchestrator.max_concurrent_rollouts, 1000, total);
  const baseUrls = input.config.inference.base_urls;
  const windows = livenessOf(input.config);
  const results: (RolloutSummary | undefined)[] = new Array(total);
  const doneInGroup = new Array<number>(input.tasks.length).fill(0);
  let done = 0;
  let next = 0;
  let waitingForInference = false;
  let groupsDone = 0;
  const stride = Math.max(1, Math.ceil(input.tasks.length / 8));
  const parent = input.parentWorkflowId ? getExternalWorkflowHandle(input.parentWorkflowId) : undefined;
  // The run's priority and fairness keys: runs sharing rollout workers each get their share (src/shared/fairness.ts).
  const options = rolloutOptions(input.runId, input.config.orchestrator.fairness_weight);
  const { rollout } = proxyActivities<RolloutActivities>(options);
  // Each rollout names every replica, so its worker can move it to a live one (src/agent/replicaPool.ts).
  const replicaPool = baseUrls.length > 1 && patched(PATCHES.rolloutReplicaPool);

  const report = async (extra: { waitingForDisk?: boolean; waitingForStore?: boolean; waitingForRolloutWorkers?: boolean } = {}): Promise<void> => {
    if (!parent) return;
    try {
      await parent.signal(rolloutProgressSignal, { step: input.step, done, total, waitingForInference, ...extra });
    } catch (err) {
      // Progress is cosmetic; a parent that moved on must not fail the rollouts.
      log.warn('could not report rollout progress to the parent', { error: String(err) });
    }
  };

  const inputFor = (i: number): RolloutInput => {
    const g = Math.floor(i / perTask);
    const k = i % perTask;
    const task = input.tasks[g]!;
    const env = input.config.env[task.envIndex]!;
    return {
      runId: input.runId,
      step: input.step,
      groupId: task.groupId,
      rolloutIndex: k,
      envId: task.envId,
      task: { datasetPath: task.datasetPath, instanceId: task.instanceId },
      taskSetDir: input.taskSetDir,
      policyVersion: input.policyVersion,
      modelName: input.modelName,
      sampling: input.config.sampling,
      envArgs: env.args,
      rubric: env.rubric,
      sandbox: input.config.sandbox,
      // Spread rollouts over the replicas; a group's rollouts share none on purpose (no cache skew).
      inferenceBaseUrl: baseUrls[i % baseUrls.length]!,
      ...(replicaPool ? { inferenceBaseUrls: [...baseUrls] } : {}),
      seed: rolloutSeed(input.seed, input.step, g, k),
      liveness: forActivity(windows, 'rollout'),
      ...(input.artifacts ? { artifacts: input.artifacts } : {}),
    };
  };

  // Rollouts that found their disk full and wait for space now; the parent shows waiting-for-disk while any do.
  // A rollout counts as waiting from its first DiskFull until one of its tries ends otherwise.
  const onDisk = new Set<number>();
  const diskWaitStarts = async (i: number): Promise<void> => {
    if (onDisk.has(i)) return;
    onDisk.add(i);
    if (onDisk.size === 1) await report({ waitingForDisk: true });
  };
  const diskWaitEnds = async (i: number): Promise<void> => {
    if (!onDisk.delete(i)) return;
    if (onDisk.size === 0) await report({ waitingForDisk: false });
  };

  // The same for the artifact store (StoreUnavailable, rolloutStoreWait patch): waiting-for-store.
  const onStore = new Set<number>();
  const storeWaitStarts = async (i: number): Promise<void> => {
    if (onStore.has(i)) return;
    onStore.add(i);
    if (onStore.size === 1) await report({ waitingForStore: true });
  };
  const storeWaitEnds = async (i: number): Promise<void> => {
    if (!onStore.delete(i)) return;
    if (onStore.size === 0) await report({ waitingForStore: false });
  };

  // The step's own store/disk waits (storeRolloutSummaries), shown by the parent like its own.
  const waiter: OutageWaiter = {
    outageLimits: input.outageWaits,
    outageHandoffs: 0,
    setWaitingForStore: (on) => {
      if (on === (onStore.size > 0)) return false;
      if (on) onStore.add(-1); else onStore.delete(-1);
      void report({ waitingForStore: on });
      return true;
    },
    setWaitingForDisk: (on) => {
      if (on === (onDisk.size > 0)) return false;
      if (on) onDisk.add(-1); else onDisk.delete(-1);
      void report({ waitingForDisk: on });
      return true;
    },
  };

  // A disk full (or a store down) for longer than a few tries: the rollout is handed to an OutageWait
  // child, which continues as new while the fault lasts, so this history grows by one child (outageWait.ts).
  const handOffRollout = async (i: number, fault: OutageType, waitS: number): Promise<RolloutSummary> => {
    await (fault === 'DiskFull' ? diskWaitStarts(i) : storeWaitStarts(i));
    return handOff<RolloutSummary>(callOf<RolloutActivities, 'rollout'>(options, 'rollout', inputFor(i)), fault, waitS, input.outageWaits, waiter.outageHandoffs++);
  };

  /** One try of rollout i (or its hand-off); a try that ends other than DiskFull ends its disk wait (StoreUnavailable: store wait). */
  const attempt = async (i: number, handOffNow: OutageType | undefined, waitS: number): Promise<RolloutSummary> => {
    try {
      const r = handOffNow ? await handOffRollout(i, handOffNow, waitS) : await rollout(inputFor(i));
      await diskWaitEnds(i);
      // Guarded, not just awaited: an await here would delay this lane's next command by a few
      // microtasks in histories with no store wait, reordering it against other lanes' on replay.
      if (onStore.has(i)) await storeWaitEnds(i);
      return r;
    } catch (err) {
      const fault = outageOf(err);
      if (fault !== 'DiskFull') await diskWaitEnds(i);
      if (fault !== 'StoreUnavailable' && onStore.has(i)) await storeWaitEnds(i);
      throw err;
    }
  };

  const runOne = async (i: number): Promise<RolloutSummary> => {
    const handoffAfter = input.outageWaits?.handoffAfter ?? DEFAULT_HANDOFF_AFTER;
    // diskWait/diskTries: the pause and the tries of this rollout's outage wait (a full disk or, since rolloutStoreWait, the store).
    for (let round = 1, diskWait = 2, diskTries = 0, fault: OutageType = 'DiskFull'; ; round++) {
      try {
        const handOffNow = diskTries >= handoffAfter;
        if (handOffNow) deprecatePatch(DEPRECATED_PATCHES.outageHandoff);
        return await attempt(i, handOffNow ? fault : undefined, diskWait);
      } catch (err) {
        // The store is unreachable (the trajectory write, the run's config): wait for it like a full disk,
        // with no round or attempt used.
        if (outageOf(err) === 'StoreUnavailable') {
          deprecatePatch(DEPRECATED_PATCHES.rolloutStoreWait);
          log.warn('a rollout found the artifact store unreachable; waiting for it', { i, error: (err as ActivityFailure).cause!.message });
          fault = 'StoreUnavailable';
          diskTries++;
          await storeWaitStarts(i);
          await sleep(`${diskWait} seconds`);
          diskWait = Math.min(diskWait * 2, input.outageWaits?.capS ?? STORE_WAIT_CAP_S);
          round--;
          continue;
        }
        // A full disk: wait for an operator to free space, for as long as it takes (not a round).
        if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'DiskFull') {
          deprecatePatch(DEPRECATED_PATCHES.diskWait);
          log.warn('a rollout found its disk full; waiting for space', { i, error: err.cause.message });
          fault = 'DiskFull';
          diskTries++;
          deprecatePatch(DEPRECATED_PATCHES.diskWaitHeld);
          await diskWaitStarts(i);
          await sleep(`${diskWait} seconds`);
          diskWait = Math.min(diskWait * 2, input.outageWaits?.capS ?? DISK_WAIT_CAP_S);
          round--;
          continue;
        }
        if (!(err instanceof ActivityFailure) || round >= MAX_ROUNDS) throw err;
        if (err.cause instanceof ApplicationFailure && err.cause.nonRetryable) throw err;
        // Retries ran out: most often inference restarted and lost its adapters. Put the version back, then retry.
        log.warn('rollout failed after its retries; checking inference before trying again', { i, round, error: String(err.cause ?? err) });
        deprecatePatch(DEPRECATED_PATCHES.stepInferenceWait);
        await ensureServedShared();
      }
    }
  };

  const syncRequest = () => ({
    runId: input.runId, baseUrls, policyVersion: input.policyVersion, adapter: input.adapter, keepFromVersion: input.keepFromVersion,
    liveness: forActivity(windows, 'weight_sync'), artifacts: input.artifacts, quorum: syncQuorum(input.config.inference),
  });
  const setWaitingForInference = async (on: boolean): Promise<void> => {
    if (waitingForInference === on) return;
    waitingForInference = on;
    await report();
  };

  /**
   * Make sure inference serves the step's version, once for every lane that asks meanwhile (one
   * wait, not one per lane). A host whose sync worker does not pick up is inference down too. After
   * a few tries the wait goes to an InferenceWait child that continues as new (inferenceWait.ts).
   */
  let serving: Promise<void> | undefined;
  let inferenceHandoffs = 0;
  const ensureServedShared = (): Promise<void> => {
    serving ??= serveStepVersion().finally(() => { serving = undefined; });
    return serving;
  };
  const serveStepVersion = async (): Promise<void> => {
    const hosts = input.config.inference.sync_task_queues ?? [];
    const limits = input.outageWaits;
    for (let wait = 5, failed = 0; ; wait = Math.min(wait * 2, limits?.capS ?? INFERENCE_WAIT_CAP_S)) {
      try {
        await syncAllHosts(syncRequest(), hosts);
        await setWaitingForInference(false);
        return;
      } catch (err) {
        if (!inferenceDown(err, hosts)) throw err;
        if (!waitingForInference) log.warn('inference is down; the step waits for it', { error: String((err as ActivityFailure).cause?.message ?? err) });
        await setWaitingForInference(true);
        if (++failed >= (limits?.handoffAfter ?? DEFAULT_HANDOFF_AFTER)) {
          await handOffInferenceWait(syncRequest(), hosts, wait, limits, inferenceHandoffs++);
          await setWaitingForInference(false);
          return;
        }
        await sleep(`${wait} seconds`);
      }
    }
  };

  // Rollouts pending and none finishing: are rollout workers alive at all? (rolloutWorkersWatch patch)
  // A rollout has no schedule-to-start timeout (a busy pool queues rollouts for long, and that is no
  // fault), so with every worker gone they wait in the queue; the watchdog makes that a status.
  let rolloutsOver = false;
  let waitingForWorkers = false;
  const setWaitingForWorkers = async (on: boolean): Promise<void> => {
    if (waitingForWorkers === on) return;
    waitingForWorkers = on;
    if (on) log.warn('rollouts are pending, none runs and no rollout worker polls: waiting for rollout workers');
    else log.info('rollout workers are back; the step goes on');
    await report({ waitingForRolloutWorkers: on });
  };
  const watchdog = async (): Promise<void> => {
    const every = input.rolloutWorkersWatchS ?? ROLLOUT_WORKERS_WATCH_S;
    let tick = every;
    let seenDone = done;
    const info = workflowInfo();
    // A wait the step already shows (inference, store, disk) is not a worker problem: the watchdog
    // sleeps through it on a condition (no timer, no events), so a long outage costs it nothing.
    const knownWait = () => waitingForInference || onStore.size > 0 || onDisk.size > 0;
    while (!rolloutsOver) {
      if (knownWait()) {
        await condition(() => rolloutsOver || !knownWait());
        seenDone = -1;
        continue;
      }
      if (await condition(() => rolloutsOver || knownWait(), `${tick} seconds`)) continue;
      if (done !== seenDone) {
        // Progress: workers are alive. Nothing to ask.
        seenDone = done;
        tick = every;
        continue;
      }
      try {
        const seen = await rolloutWorkersSeen({ workflowId: info.workflowId, runId: info.runId, taskQueue: ROLLOUT_TASK_QUEUE });
        const none = seen.queued > 0 && seen.running === 0 && seen.pollers === 0;
        await setWaitingForWorkers(none);
        // While none: ask less often (each ask costs ~10 events), at most twice the period apart.
        tick = none ? Math.min(tick * 2, every * 2) : every;
      } catch (err) {
        log.warn('could not ask whether rollout workers are alive', { error: String(err) });
      }
    }
  };

  const lane = async (): Promise<void> => {
    while (next < total) {
      const i = next++;
      results[i] = await runOne(i);
      done++;
      if (waitingForWorkers) await setWaitingForWorkers(false);
      const g = Math.floor(i / perTask);
      // Progress at most ~8 times a step: each signal costs the parent history events.
      if (++doneInGroup[g]! === perTask && (++groupsDone % stride === 0 || groupsDone === input.tasks.length)) await report();
    }
  };

  let watching: Promise<void> | undefined;
  if (total > 0) {
    deprecatePatch(DEPRECATED_PATCHES.rolloutWorkersWatch);
    watching = watchdog();
  }
  try {
    await Promise.all(Array.from({ length: window }, lane));
  } finally {
    rolloutsOver = true;
  }
  await watching;
  await setWaitingForWorkers(false);
  log.info('step rollouts done', { step: input.step, total, historyLength: workflowInfo().historyLength });
  const all = results as RolloutSummary[];
  deprecatePatch(DEPRECATED_PATCHES.summariesByRef);
  // One artifact, written in parts that each fit a payload: the parent never holds the summaries.
  const common = { runId: input.runId, step: input.step, ...(input.round ? { round: input.round } : {}), ...(input.artifacts ? { artifacts: input.artifacts } : {}) };
  // A store down or a disk full here waits (the parent shows it) instead of failing the step.
  const storeSummaries = (req: Parameters<typeof storeRolloutSummaries>[0]): Promise<ArtifactRef> => {
    deprecatePatch(DEPRECATED_PATCHES.stepSummariesStoreWait);
    return waitForStore(waiter, () => storeRolloutSummaries(req), callOf<MainActivities, 'storeRolloutSummaries'>(SUMMARIES_OPTIONS, 'storeRolloutSummaries', req));
  };
  if (all.length <= SUMMARIES_PER_PART) {
    const summaries = await storeSummaries({ ...common, summaries: all });
    return { summaries, count: all.length, events: workflowInfo().historyLength };
  }
  const parts: ArtifactRef[] = [];
  for (let i = 0; i < all.length; i += SUMMARIES_PER_PART) {
    parts.push(await storeSummaries({ ...common, part: parts.length, summaries: all.slice(i, i + SUMMARIES_PER_PART) }));
  }
  const summaries = await storeSummaries({ ...common, parts });
  return { summaries, count: all.length, events: workflowInfo().historyLength };
}
