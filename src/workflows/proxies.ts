/**
 * The activity proxies TrainRun and its helpers call, with their timeouts and
 * retries in one place: what a dead worker, a slow trainer or a down server
 * looks like to the workflow is decided here.
 */
import type { Duration } from '@temporalio/common';
import { proxyActivities, type ActivityOptions } from '@temporalio/workflow';
import type { BatchActivities, MainActivities } from '../contracts/activities';
import type { EvalActivities } from '../contracts/eval';
import type { TrainerActivities } from '../contracts/trainer';
import type { TrainerTimeouts } from '../contracts/run';
import { evalPriority, trainingPriority } from '../shared/fairness';

/**
 * Light main-worker activities. The options are exported so a long outage can hand a call to OutageWait as data.
 * The main worker beats for each of them (beatWhileRunning, src/activities/liveness.ts): a killed worker is noticed
 * at the heartbeat timeout, not after 10 minutes. Replay compares no options, so older histories replay unchanged.
 */
export const LIGHT: ActivityOptions = {
  startToCloseTimeout: '10 minutes',
  heartbeatTimeout: '1 minute',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 10 },
};
export type LightActivities = MainActivities & BatchActivities;
export const light = proxyActivities<LightActivities>(LIGHT);

export const sync = proxyActivities<MainActivities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

/** A step's rollout summaries, written in parts (StepRollouts, RolloutShard); exported so a store wait can hand the call off. */
export const SUMMARIES_OPTIONS: ActivityOptions = {
  startToCloseTimeout: '5 minutes',
  retry: { initialInterval: '2 seconds', maximumInterval: '30 seconds', maximumAttempts: 10 },
};
export const { storeRolloutSummaries } = proxyActivities<MainActivities>(SUMMARIES_OPTIONS);

/** The rollout worker's queue. A literal: src/shared/paths imports node:path, which the workflow sandbox refuses. */
export const ROLLOUT_TASK_QUEUE = 'ratchet-rollout';

const CHUNK_OPTIONS: ActivityOptions = {
  taskQueue: ROLLOUT_TASK_QUEUE,
  // A chunk runs its rollouts at once; slots on the worker may queue some (src/activities/rolloutChunk.ts).
  startToCloseTimeout: '2 hours',
  heartbeatTimeout: '1 minute',
  retry: { initialInterval: '2 seconds', backoffCoefficient: 2, maximumInterval: '30 seconds', maximumAttempts: 4 },
};

/**
 * A step's rollout chunks (StepRollouts, RolloutShard), at the run's training priority and fairness weight;
 * `heartbeat` (TrainRunInput.rolloutHeartbeat) shortens how long a dead worker's chunk waits before its retry.
 */
export function chunkOptions(runId: string, fairnessWeight: number, heartbeat?: Duration): ActivityOptions {
  return { ...CHUNK_OPTIONS, ...(heartbeat !== undefined ? { heartbeatTimeout: heartbeat } : {}), priority: trainingPriority(runId, fairnessWeight) };
}

/** Are rollout workers alive? Asked by the rollout-workers watch only when no rollout finished for a while. */
export const { rolloutWorkersSeen } = proxyActivities<MainActivities>({ startToCloseTimeout: '30 seconds', retry: { maximumAttempts: 3 } });

/** Only `trainer.announce` goes to the shared queue; it waits as long as it takes for a trainer to appear. */
export const announcer = proxyActivities<TrainerActivities>({
  taskQueue: 'ratchet-trainer',
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '2 seconds', maximumInterval: '30 seconds' },
});

/**
 * The trainer's own queue: a dead trainer shows up as a schedule-to-start or heartbeat timeout, not a hang.
 * The trainer heartbeats every ~10 s from a liveness thread however slow a micro-batch is, and stops when
 * its watchdog sees no progress (trainer/ratchet_trainer/liveness.py): a hung trainer times out too.
 */
export function trainerOptions(taskQueue: string, t: TrainerTimeouts = {}, startToCloseTimeout: ActivityOptions['startToCloseTimeout'] = '2 hours'): ActivityOptions {
  return {
    taskQueue,
    scheduleToStartTimeout: t.scheduleToStart ?? '1 minute',
    startToCloseTimeout,
    heartbeatTimeout: t.heartbeat ?? '1 minute',
    retry: { maximumAttempts: 2 },
  };
}
export const trainerOn = (taskQueue: string, t: TrainerTimeouts = {}) => proxyActivities<TrainerActivities>(trainerOptions(taskQueue, t));

// Loading a checkpoint and saving one heartbeat the same way; they may take a while on CPU.
export function trainerIoOptions(taskQueue: string, t: TrainerTimeouts = {}): ActivityOptions {
  return trainerOptions(taskQueue, t, '20 minutes');
}
export const trainerIoOn = (taskQueue: string, t: TrainerTimeouts = {}) => proxyActivities<TrainerActivities>(trainerIoOptions(taskQueue, t));

/** An inference host's worker (src/workers/inference.ts): a host that is down is noticed by schedule-to-start. */
export function syncOn(taskQueue: string) {
  return proxyActivities<MainActivities>({
    taskQueue,
    scheduleToStartTimeout: '2 minutes',
    startToCloseTimeout: '10 minutes',
    heartbeatTimeout: '1 minute',
    retry: { maximumAttempts: 3 },
  });
}

/** EvalSweep's planning and its per-version record on `ratchet`. */
export const { evalPlan, evalRecord } = proxyActivities<EvalActivities>({
  startToCloseTimeout: '10 minutes',
  // evalRecord reads every episode's trajectory and heartbeats on a timer meanwhile.
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

/** Eval rollouts: on the rollout queue beside training, below it by priority (evalRolloutOptions). */
const EVAL_ROLLOUT_OPTIONS: ActivityOptions = {
  taskQueue: ROLLOUT_TASK_QUEUE,
  startToCloseTimeout: '30 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3, nonRetryableErrorTypes: ['TaskNotFound', 'InvalidInput'] },
};

/** An eval sweep's rollouts carry the run's fairness key and run below its training by priority (src/shared/fairness.ts). */
export function evalRolloutOptions(runId: string): ActivityOptions {
  return { ...EVAL_ROLLOUT_OPTIONS, priority: evalPriority(runId) };
}

/** EvalSweep's weight sync of a version to evaluate (more attempts than a step's `sync`). */
export const evalSync = proxyActivities<MainActivities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 5 },
});

/** `ratchet release`: a trainer that is gone frees nothing and needs nothing, so schedule-to-start says so in 30 s. */
export function releaseOn(taskQueue: string) {
  return proxyActivities<TrainerActivities>({
    taskQueue, scheduleToStartTimeout: '30 seconds', startToCloseTimeout: '10 minutes', retry: { maximumAttempts: 1 },
  });
}
