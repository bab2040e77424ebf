/**
 * RolloutWorkersWait: the long tail of the rollout-worker watchdog (rolloutShard.ts), in its own
 * workflow that continues as new. Workflow code.
 *
 * With no rollout worker polling, the watchdog asks Temporal every tick whether one came back:
 * a timer and an activity each time, in the history of the step (or shard) whose chunks wait
 * in the queue. After a few such checks it hands the wait here: this child checks on, continues
 * as new every `perExecution` checks, and returns what it saw once the view changed (a worker
 * polls or runs a chunk, nothing is queued any more, or the hosts out of service changed), so
 * the caller's history holds one child per change, however long the wait.
 */
import { continueAsNew, executeChild, log, sleep, workflowInfo } from '@temporalio/workflow';
import type { RolloutWorkersInput, RolloutWorkersSeen } from '../contracts/activities';
import { boundedHosts } from '../contracts/step';
import { rolloutWorkersSeen } from './proxies';

/** Checks one execution makes before it continues as new (~10 events each). */
export const ROLLOUT_WORKERS_CHECKS_PER_EXECUTION = 100;

export interface RolloutWorkersWaitInput {
  /** What the caller asks about (its own workflow and run, the rollout queue). */
  ask: RolloutWorkersInput;
  /** Seconds between checks. */
  everyS: number;
  /** The view the caller shows now: the child returns once it differs. */
  shown: RolloutWorkersSeen;
  perExecution?: number;
  checksSoFar?: number;
}

/** No worker runs or polls while rollouts wait queued. */
export const noRolloutWorker = (w: RolloutWorkersSeen): boolean => w.queued > 0 && w.running === 0 && w.pollers === 0;

/** The part of the view the caller shows: whether it waits, and the hosts it names (bounded). */
export function shownKey(w: RolloutWorkersSeen): string {
  return JSON.stringify({ none: noRolloutWorker(w), hosts: noRolloutWorker(w) ? boundedHosts(w.unhealthy ?? []).map((h) => [h.host, h.error]) : [] });
}

export async function RolloutWorkersWait(input: RolloutWorkersWaitInput): Promise<RolloutWorkersSeen> {
  const perExecution = input.perExecution ?? ROLLOUT_WORKERS_CHECKS_PER_EXECUTION;
  const shown = shownKey(input.shown);
  for (let checks = 0; ; checks++) {
    if (checks >= perExecution) {
      log.info('still no rollout worker; continuing as new so this wait does not grow one history', { checks: (input.checksSoFar ?? 0) + checks });
      await continueAsNew<typeof RolloutWorkersWait>({ ...input, checksSoFar: (input.checksSoFar ?? 0) + checks });
    }
    await sleep(`${input.everyS} seconds`);
    let seen: RolloutWorkersSeen;
    try {
      seen = await rolloutWorkersSeen(input.ask);
    } catch (err) {
      log.warn('could not ask whether rollout workers are alive', { error: String(err) });
      continue;
    }
    if (shownKey(seen) !== shown) return seen;
  }
}

/** Hands the watchdog's wait to a RolloutWorkersWait child; returns the first view that differs from `shown`. */
export async function handOffRolloutWorkersWait(input: Omit<RolloutWorkersWaitInput, 'checksSoFar'>, seq: number): Promise<RolloutWorkersSeen> {
  const info = workflowInfo();
  log.warn('no rollout worker for a while: handing the watch to a RolloutWorkersWait workflow that continues as new');
  return executeChild(RolloutWorkersWait, {
    args: [input],
    // Unique per execution of the caller and per hand-off in it: replays name the same child.
    workflowId: `${info.workflowId}-rollout-workers-${info.runId.slice(0, 8)}-${seq}`,
    taskQueue: info.taskQueue,
  });
}
