/**
 * Are rollout workers alive? Temporal's own view, for StepRollouts' watchdog: a rollout
 * activity has no schedule-to-start timeout (a busy pool queues rollouts for long, which
 * is not a fault), so with every rollout worker gone the rollouts just wait in the queue.
 * When no rollout has finished for a while, the workflow asks here: does a worker run
 * any of its pending rollouts, and does any worker poll the rollout queue? Neither: the
 * run shows waiting-for-rollout-workers until a worker appears.
 */
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { RolloutWorkersActivities, RolloutWorkersInput, RolloutWorkersSeen } from '../contracts';

const { PendingActivityState, TaskQueueKind, TaskQueueType } = temporal.api.enums.v1;

/** Seconds since a protobuf timestamp; Infinity when absent. */
function ageS(ts: { seconds?: unknown } | null | undefined, nowS: number): number {
  const s = ts?.seconds;
  if (s === undefined || s === null) return Infinity;
  return nowS - Number(s);
}

export async function rolloutWorkersSeenWith(client: Client, input: RolloutWorkersInput, now = Date.now()): Promise<RolloutWorkersSeen> {
  const nowS = now / 1000;
  const desc = await client.workflow.getHandle(input.workflowId, input.runId).describe();
  const pending = (desc.raw.pendingActivities ?? []).filter((a) => a.activityType?.name === 'rollout');
  const running = pending.filter((a) => a.state === PendingActivityState.PENDING_ACTIVITY_STATE_STARTED).length;
  const tq = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: input.taskQueue, kind: TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
    taskQueueType: TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
  });
  const fresh = input.pollerFreshS ?? 120;
  const pollers = (tq.pollers ?? []).filter((p) => ageS(p.lastAccessTime, nowS) <= fresh).length;
  return { running, queued: pending.length - running, pollers };
}

export function createRolloutWorkersActivities(deps: { client?: () => Client } = {}) {
  return {
    async rolloutWorkersSeen(input: RolloutWorkersInput): Promise<RolloutWorkersSeen> {
      return rolloutWorkersSeenWith(deps.client ? deps.client() : Context.current().client, input);
    },
  } satisfies RolloutWorkersActivities;
}
