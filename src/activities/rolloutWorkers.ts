/**
 * Are rollout workers alive? Temporal's own view, for StepRollouts' watchdog: a rollout
 * activity has no schedule-to-start timeout (a busy pool queues rollouts for long, which
 * is not a fault), so with every rollout worker gone the rollouts just wait in the queue.
 * When no rollout has finished for a while, the workflow asks here: does a worker run
 * any of its pending rollouts, and does any worker poll the rollout queue? Neither: the
 * run shows waiting-for-rollout-workers until a worker appears, or waiting-for-healthy-rollout-hosts
 * naming the hosts that took themselves out of service (src/rollouts/hostHealth.ts).
 */
import { Context } from '@temporalio/activity';
import type { Client } from '@temporalio/client';
import { temporal } from '@temporalio/proto';
import type { RolloutWorkersActivities, RolloutWorkersInput, RolloutWorkersSeen } from '../contracts';
import { boundedHosts } from '../contracts/step';
import { unhealthyHosts, type HealthBackend } from '../rollouts/hostHealth';

const { PendingActivityState, TaskQueueKind, TaskQueueType } = temporal.api.enums.v1;

/** Seconds since a protobuf timestamp; Infinity when absent. */
function ageS(ts: { seconds?: unknown } | null | undefined, nowS: number): number {
  const s = ts?.seconds;
  if (s === undefined || s === null) return Infinity;
  return nowS - Number(s);
}

export async function rolloutWorkersSeenWith(client: Client, input: RolloutWorkersInput, now = Date.now(), store?: HealthBackend): Promise<RolloutWorkersSeen> {
  const nowS = now / 1000;
  const desc = await client.workflow.getHandle(input.workflowId, input.runId).describe();
  // One rollout each (rollouts_per_chunk = 0) or a chunk of them (every config since 0.6).
  const pending = (desc.raw.pendingActivities ?? []).filter((a) => ROLLOUT_TYPES.includes(a.activityType?.name ?? ''));
  const running = pending.filter((a) => a.state === PendingActivityState.PENDING_ACTIVITY_STATE_STARTED).length;
  const tq = await client.workflowService.describeTaskQueue({
    namespace: client.options.namespace,
    taskQueue: { name: input.taskQueue, kind: TaskQueueKind.TASK_QUEUE_KIND_NORMAL },
    taskQueueType: TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
  });
  const fresh = input.pollerFreshS ?? 120;
  const pollers = (tq.pollers ?? []).filter((p) => ageS(p.lastAccessTime, nowS) <= fresh).length;
  const seen: RolloutWorkersSeen = { running, queued: pending.length - running, pollers };
  // Only when no worker is left: which hosts took themselves out of service, and why (their records in the store).
  if (store && seen.queued > 0 && running === 0 && pollers === 0) {
    try {
      const hosts = await unhealthyHosts(store, now);
      if (hosts.length) seen.unhealthy = boundedHosts(hosts);
    } catch {
      // The store is down too: the run still shows waiting-for-rollout-workers.
    }
  }
  return seen;
}

const ROLLOUT_TYPES = ['rollout', 'rolloutChunk'];

export function createRolloutWorkersActivities(deps: { client?: () => Client; store?: HealthBackend } = {}) {
  return {
    async rolloutWorkersSeen(input: RolloutWorkersInput): Promise<RolloutWorkersSeen> {
      return rolloutWorkersSeenWith(deps.client ? deps.client() : Context.current().client, input, Date.now(), deps.store);
    },
  } satisfies RolloutWorkersActivities;
}
