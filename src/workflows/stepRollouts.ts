/**
 * StepRollouts: one step's rollouts as a child of TrainRun, so the parent's
 * history grows by a handful of events per step however many rollouts there are.
 * A sliding window keeps at most `maxConcurrent` rollout activities pending
 * (far below Temporal's 2,000), and the parent hears progress per finished group.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  getExternalWorkflowHandle,
  log,
  patched,
  proxyActivities,
  sleep,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import type { RolloutSummary } from '../rollouts/trajectory';
import type { MainActivities, RolloutActivities, RolloutInput } from '../contracts/activities';
import type { StepRolloutsInput, StepRolloutsResult } from '../contracts/step';
import { forActivity, livenessOf } from '../shared/liveness';
import { trainingPriority } from '../shared/fairness';
import { rolloutProgressSignal } from './messages';
import { PATCHES } from './patches';
import { DEFAULT_HANDOFF_AFTER, DISK_WAIT_CAP_S, callOf, handOff } from './outageWait';

const ROLLOUT_OPTIONS: ActivityOptions = {
  taskQueue: 'ratchet-rollout',
  startToCloseTimeout: '30 minutes',
  // Rollouts heartbeat every ~10 s and stop when stalled (src/activities/liveness.ts): a dead or hung attempt is noticed in a minute.
  heartbeatTimeout: '1 minute',
  retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 4 },
};
const { storeRolloutSummaries } = proxyActivities<MainActivities>({
  startToCloseTimeout: '5 minutes',
  retry: { initialInterval: '2 seconds', maximumInterval: '30 seconds', maximumAttempts: 10 },
});

/** Summaries per stored part (src/activities/rolloutSummaries.ts SUMMARIES_PER_PART; workflow code cannot import it). */
const SUMMARIES_PER_PART = 1000;

/** StepRollouts returns its summaries as one artifact ref (new), or inline (histories from before the patch). */
export const SUMMARIES_BY_REF_PATCH = PATCHES.summariesByRef;

const { syncWeights } = proxyActivities<MainActivities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

/** Rounds of (retry the rollout, then make sure inference serves its version) before giving up. */
const MAX_ROUNDS = 30;

export function rolloutSeed(seed: number, step: number, group: number, index: number): number {
  return (((seed * 1_000_003 + step * 10_007 + group * 101 + index) % 2_147_483_647) + 2_147_483_647) % 2_147_483_647;
}

export async function StepRollouts(input: StepRolloutsInput): Promise<StepRolloutsResult> {
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
  const rolloutOptions: ActivityOptions = { ...ROLLOUT_OPTIONS, priority: trainingPriority(input.runId, input.config.orchestrator.fairness_weight) };
  const { rollout } = proxyActivities<RolloutActivities>(rolloutOptions);

  const report = async (extra: { waitingForDisk?: boolean } = {}): Promise<void> => {
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
      seed: rolloutSeed(input.seed, input.step, g, k),
      liveness: forActivity(windows, 'rollout'),
      ...(input.artifacts ? { artifacts: input.artifacts } : {}),
    };
  };

  // Rollouts that found their disk full and wait for space now; the parent shows waiting-for-disk while any do.
  // Histories from before the diskWaitHeld patch reported each pause on its own (the status fell back to
  // running between tries); they replay that way.
  let diskWaiters = 0;
  const waitForDiskUnheld = async (diskWait: number): Promise<void> => {
    if (diskWaiters++ === 0) await report({ waitingForDisk: true });
    await sleep(`${diskWait} seconds`);
    if (--diskWaiters === 0) await report({ waitingForDisk: false });
  };
  // Since: a rollout counts as waiting from its first DiskFull until one of its tries ends otherwise.
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

  // A disk full for longer than a few tries: the rollout is handed to an OutageWait child, which
  // continues as new while the disk stays full, so this history grows by one child (outageWait.ts).
  let handoffs = 0;
  const handOffRollout = async (i: number, waitS: number): Promise<RolloutSummary> => {
    await diskWaitStarts(i);
    return handOff<RolloutSummary>(callOf<RolloutActivities, 'rollout'>(rolloutOptions, 'rollout', inputFor(i)), 'DiskFull', waitS, input.outageWaits, handoffs++);
  };

  /** One try of rollout i (or its hand-off); a try that ends other than DiskFull ends its disk wait. */
  const attempt = async (i: number, handOffNow: boolean, waitS: number): Promise<RolloutSummary> => {
    try {
      const r = handOffNow ? await handOffRollout(i, waitS) : await rollout(inputFor(i));
      await diskWaitEnds(i);
      return r;
    } catch (err) {
      if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'DiskFull')) await diskWaitEnds(i);
      throw err;
    }
  };

  const runOne = async (i: number): Promise<RolloutSummary> => {
    const handoffAfter = input.outageWaits?.handoffAfter ?? DEFAULT_HANDOFF_AFTER;
    for (let round = 1, diskWait = 2, diskTries = 0; ; round++) {
      try {
        // patched() only at the hand-off: a history recorded before it waited on here, and replays so.
        return await attempt(i, diskTries >= handoffAfter && patched(PATCHES.outageHandoff), diskWait);
      } catch (err) {
        // A full disk: wait for an operator to free space, for as long as it takes (not a round).
        // patched() only where a DiskFull arrives: an older history failed there, and replays so.
        if (err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'DiskFull' && patched(PATCHES.diskWait)) {
          log.warn('a rollout found its disk full; waiting for space', { i, error: err.cause.message });
          diskTries++;
          if (patched(PATCHES.diskWaitHeld)) {
            await diskWaitStarts(i);
            await sleep(`${diskWait} seconds`);
          } else {
            await waitForDiskUnheld(diskWait);
          }
          diskWait = Math.min(diskWait * 2, input.outageWaits?.capS ?? DISK_WAIT_CAP_S);
          round--;
          continue;
        }
        if (!(err instanceof ActivityFailure) || round >= MAX_ROUNDS) throw err;
        if (err.cause instanceof ApplicationFailure && err.cause.nonRetryable) throw err;
        // Retries ran out: most often inference restarted and lost its adapters. Put the version back, then retry.
        log.warn('rollout failed after its retries; checking inference before trying again', { i, round, error: String(err.cause ?? err) });
        await ensureServed();
      }
    }
  };

  const ensureServed = async (): Promise<void> => {
    for (let wait = 5; ; wait = Math.min(wait * 2, 60)) {
      try {
        const req = { runId: input.runId, baseUrls, policyVersion: input.policyVersion, adapter: input.adapter, keepFromVersion: input.keepFromVersion, liveness: forActivity(windows, 'weight_sync'), artifacts: input.artifacts };
        const hosts = input.config.inference.sync_task_queues ?? [];
        // Hosts without a shared disk pull the adapter themselves (src/workers/inference.ts).
        if (hosts.length) await Promise.all(hosts.map((taskQueue) => proxyActivities<MainActivities>({ taskQueue, scheduleToStartTimeout: '2 minutes', startToCloseTimeout: '10 minutes', retry: { maximumAttempts: 3 } }).syncWeights({ ...req, baseUrls: [] })));
        else await syncWeights(req);
        if (waitingForInference) {
          waitingForInference = false;
          await report();
        }
        return;
      } catch (err) {
        if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable')) throw err;
        if (!waitingForInference) {
          waitingForInference = true;
          await report();
        }
        await sleep(`${wait} seconds`);
      }
    }
  };

  const lane = async (): Promise<void> => {
    while (next < total) {
      const i = next++;
      results[i] = await runOne(i);
      done++;
      const g = Math.floor(i / perTask);
      // Progress at most ~8 times a step: each signal costs the parent history events.
      if (++doneInGroup[g]! === perTask && (++groupsDone % stride === 0 || groupsDone === input.tasks.length)) await report();
    }
  };

  await Promise.all(Array.from({ length: window }, lane));
  log.info('step rollouts done', { step: input.step, total, historyLength: workflowInfo().historyLength });
  const all = results as RolloutSummary[];
  if (!patched(SUMMARIES_BY_REF_PATCH)) return all;
  // One artifact, written in parts that each fit a payload: the parent never holds the summaries.
  const common = { runId: input.runId, step: input.step, ...(input.artifacts ? { artifacts: input.artifacts } : {}) };
  if (all.length <= SUMMARIES_PER_PART) {
    return { summaries: await storeRolloutSummaries({ ...common, summaries: all }), count: all.length };
  }
  const parts: ArtifactRef[] = [];
  for (let i = 0; i < all.length; i += SUMMARIES_PER_PART) {
    parts.push(await storeRolloutSummaries({ ...common, part: parts.length, summaries: all.slice(i, i + SUMMARIES_PER_PART) }));
  }
  return { summaries: await storeRolloutSummaries({ ...common, parts }), count: all.length };
}
