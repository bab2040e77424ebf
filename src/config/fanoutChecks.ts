/**
 * Whether a step's fan-out fits Temporal's limits (issue 24): payloads of 2 MB, the
 * 10,240-event history warning, ~500 activities in flight per execution. Checked at
 * config load and by `ratchet check`, before anything starts; each problem names the
 * key to change, the limit it breaks, and the fix. Pure.
 */
import {
  CHUNKS_PER_SHARD, EVENTS_PER_CHUNK, MAX_SHARDS, SUMMARY_BYTES_MAX, TEMPORAL_LIMITS, fanoutPlan,
} from './fanout';
import type { ConfigIssue } from './issue';
import type { RunConfig } from './schema';

export function fanoutIssues(c: RunConfig): ConfigIssue[] {
  const o = c.orchestrator;
  const total = o.batch_size * o.rollouts_per_example;
  const issues: ConfigIssue[] = [];
  const events = TEMPORAL_LIMITS.historyEventsWarn;

  const plan = fanoutPlan(total, o);
  if (plan.shards > MAX_SHARDS) {
    issues.push({
      key: 'orchestrator.chunks_per_shard',
      message: `${total} rollouts per step in chunks of orchestrator.rollouts_per_chunk = ${o.rollouts_per_chunk} over shards of ${plan.chunksPerShard} chunks make ${plan.shards} shard children, ` +
        `over the ${MAX_SHARDS} one StepRollouts keeps in flight (Temporal's ~${TEMPORAL_LIMITS.activitiesInFlight} per execution). ` +
        `Fix: raise chunks_per_shard (up to ${CHUNKS_PER_SHARD.max}) or rollouts_per_chunk, or lower batch_size`,
    });
  }
  if (plan.windowPerShard > TEMPORAL_LIMITS.activitiesInFlight) {
    issues.push({
      key: 'orchestrator.max_concurrent_rollouts',
      message: `${o.max_concurrent_rollouts} rollouts in flight in chunks of ${o.rollouts_per_chunk} over ${plan.shards} shard(s) put ${plan.windowPerShard} chunk activities in flight in one execution, ` +
        `over Temporal's ~${TEMPORAL_LIMITS.activitiesInFlight}. Fix: lower max_concurrent_rollouts, or raise orchestrator.rollouts_per_chunk`,
    });
  }
  // StepRollouts' own history: a few events per shard (started, completed, status signals).
  const parentEvents = plan.shards > 1 ? plan.shards * 12 : plan.chunks * EVENTS_PER_CHUNK;
  if (parentEvents > events) {
    issues.push({
      key: 'orchestrator.chunks_per_shard',
      message: `${plan.chunks} chunks over ${plan.shards} shard(s) put ~${parentEvents} events in StepRollouts' history, over Temporal's ${events}-event limit of guidance. ` +
        'Fix: raise chunks_per_shard or rollouts_per_chunk, or lower batch_size',
    });
  }
  const detailBytes = o.rollouts_per_chunk * SUMMARY_BYTES_MAX;
  if (detailBytes > TEMPORAL_LIMITS.payloadBytes) {
    issues.push({
      key: 'orchestrator.rollouts_per_chunk',
      message: `${o.rollouts_per_chunk} rollouts' summaries in one chunk's heartbeat (~${detailBytes} bytes) exceed Temporal's ${TEMPORAL_LIMITS.payloadBytes}-byte payload limit. Fix: lower rollouts_per_chunk`,
    });
  }
  return issues;
}
