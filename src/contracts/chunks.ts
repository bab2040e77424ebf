/**
 * A step's fan-out at scale (issue 24): the step manifest by reference, rollouts in
 * chunks (one activity runs K rollouts), chunks spread over shard children. What
 * crosses history between StepRollouts, its shards and the rollout worker's
 * `rolloutChunk` activity. Pure: workflow code. The manifest's schema (zod, read by the
 * worker) is in ./manifest.ts; the bounds, Temporal's limits and the plan that cuts a step
 * are the config's (src/config/fanout.ts).
 */
import type { Duration } from '@temporalio/common';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { RolloutSummary } from './trajectory';
import type { UnhealthyRolloutHost } from './step';
import type { OutageWaitLimits } from './outage';

/** A rollout's seed (StepRollouts' formula since v0.1): a chunked step samples the same episodes as an inline one. */
export function rolloutSeed(seed: number, step: number, group: number, index: number): number {
  return (((seed * 1_000_003 + step * 10_007 + group * 101 + index) % 2_147_483_647) + 2_147_483_647) % 2_147_483_647;
}

/** The chunk c of a step of `total` rollouts: rollouts [start, end). */
export function chunkRange(c: number, perChunk: number, total: number): { start: number; end: number } {
  return { start: c * perChunk, end: Math.min((c + 1) * perChunk, total) };
}

/** The rollout worker's `rolloutChunk` activity: the manifest by reference, a range, and what is done already. */
export interface RolloutChunkInput {
  manifest: ArtifactRef;
  /** Rollouts [start, end) of the step (index = group x rollouts_per_example + k). */
  start: number;
  end: number;
  /** The run's [artifacts] store (absent: the worker's default); the manifest lives there. */
  artifacts?: StoreSettings;
  /** Rollouts of this chunk finished by an earlier call (a re-run after a wait or a round): kept, not run again. */
  done?: ChunkRolloutDone[];
}

export interface ChunkRolloutDone {
  i: number;
  summary: RolloutSummary;
}

/** What a chunk heartbeats, and what its failure carries (ApplicationFailure details[0]) to the next call. */
export interface ChunkProgress {
  done: ChunkRolloutDone[];
  /**
   * Tries of the unfinished rollouts this call started, by index (absent before 0.8): a rollout's
   * infrastructure failures are counted against its own tries, not the chunk's attempt number.
   */
  tries?: { i: number; n: number }[];
}

export interface RolloutChunkResult {
  /** The chunk's summaries, in rollout order, as one artifact. */
  summaries: ArtifactRef;
  count: number;
  /** Rollouts this call ran (the rest came from `done` or an earlier attempt's heartbeat). */
  ran: number;
}

export interface ChunkActivities {
  rolloutChunk(input: RolloutChunkInput): Promise<RolloutChunkResult>;
}

/** What StepRollouts and every shard of it share: the step's settings for the waits, and the manifest. */
export interface StepChunksContext {
  runId: string;
  step: number;
  manifest: ArtifactRef;
  total: number;
  perChunk: number;
  policyVersion: number;
  adapter?: ArtifactRef;
  /** trainer.mode = "full" (StepRolloutsInput.full). */
  full?: { checkpoint?: ArtifactRef };
  keepFromVersion: number;
  baseUrls: string[];
  syncTaskQueues: string[];
  /** Replicas (or inference hosts) a weight sync must reach (inference.sync_quorum); absent: every one. */
  syncQuorum?: number;
  weightSyncLiveness: { heartbeat_every_s: number; stall_s: number };
  fairnessWeight: number;
  artifacts?: StoreSettings;
  outageWaits?: OutageWaitLimits;
  rolloutWorkersWatchS?: number;
  /** TrainRunInput.rolloutHeartbeat: the chunks' heartbeat timeout (absent: CHUNK_OPTIONS'). */
  rolloutHeartbeat?: Duration;
  /** A refill round of difficulty filtering (> 0): its summaries get their own keys. */
  round?: number;
}

/** A RolloutShard child's input: chunks [firstChunk, endChunk) of the step, and where it stands (continue-as-new). */
export interface RolloutShardInput {
  ctx: StepChunksContext;
  shard: number;
  firstChunk: number;
  endChunk: number;
  window: number;
  /** StepRollouts, to which the shard signals its status. */
  parentWorkflowId: string;
  /** History events of the shard's earlier executions (carried across continue-as-new, for the cost ledger). */
  eventsBefore?: number;
  /** Events before continuing as new (tests set it low). */
  eventsBeforeContinue?: number;
  /** Carried across continue-as-new: the chunk summaries of chunks [firstChunk, firstChunk + parts.length). */
  parts?: ArtifactRef[];
  /** Rollouts summarized so far (carried). */
  done?: number;
}

export interface RolloutShardResult {
  summaries: ArtifactRef;
  count: number;
  /** History events over the shard's executions (the cost ledger), read at its end. */
  events?: number;
}

/** Sent by a shard to StepRollouts (signal `shardStatus`): its done count and what it waits for. */
export interface ShardStatusSignal {
  shard: number;
  done: number;
  waitingForInference?: boolean;
  waitingForDisk?: boolean;
  waitingForStore?: boolean;
  waitingForRolloutWorkers?: boolean;
  unhealthyRolloutHosts?: UnhealthyRolloutHost[];
}
