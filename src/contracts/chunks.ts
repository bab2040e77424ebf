/**
 * A step's fan-out at scale (issue 24): the step manifest by reference, rollouts in
 * chunks (one activity runs K rollouts), chunks spread over shard children. What
 * crosses history between StepRollouts, its shards and the rollout worker's
 * `rolloutChunk` activity, and the plan both sides compute alike. Pure: workflow code.
 * The manifest's schema (zod, read by the worker) is in ./manifest.ts.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { RolloutSummary } from './trajectory';
import type { UnhealthyRolloutHost } from './step';
import type { OutageWaitLimits } from './outage';
import { AUTO_SHARDS, CHUNKS_PER_SHARD, ROLLOUTS_PER_CHUNK } from './chunkBounds';
export { AUTO_SHARDS, CHUNKS_PER_SHARD, ROLLOUTS_PER_CHUNK };

/** Temporal's limits a step's fan-out is sized against (docs.temporal.io, "Temporal Cloud limits" and the server's defaults). */
export const TEMPORAL_LIMITS = {
  /** Largest payload (an activity's input or result, a heartbeat's details). */
  payloadBytes: 2 * 1024 * 1024,
  /** Events in one history past which the server warns (51,200 fail it). */
  historyEventsWarn: 10_240,
  /** Activities in flight one execution should keep at most (the server refuses 2,000). */
  activitiesInFlight: 500,
} as const;

/** Shard children one step may have (all in flight at once, each a handful of events in StepRollouts' history). */
export const MAX_SHARDS = 500;
/**
 * History events one chunk costs its execution: scheduled, started, completed, and its share of
 * workflow tasks (measured: ~4.1 per chunk on the dev server, test/unit/stepChunks.test.ts).
 */
export const EVENTS_PER_CHUNK = 5;
/** A shard continues as new once its history holds this many events (well below the 10,240 warning). */
export const SHARD_EVENTS_BEFORE_CONTINUE = 7_000;
/** A summary is ~0.8 KB; heartbeat details and a failed chunk's details carry at most K of them. */
export const SUMMARY_BYTES_MAX = 4 * 1024;

/** A rollout's seed (StepRollouts' formula since v0.1): a chunked step samples the same episodes as an inline one. */
export function rolloutSeed(seed: number, step: number, group: number, index: number): number {
  return (((seed * 1_000_003 + step * 10_007 + group * 101 + index) % 2_147_483_647) + 2_147_483_647) % 2_147_483_647;
}

/** The chunk c of a step of `total` rollouts: rollouts [start, end). */
export function chunkRange(c: number, perChunk: number, total: number): { start: number; end: number } {
  return { start: c * perChunk, end: Math.min((c + 1) * perChunk, total) };
}

export interface FanoutPlan {
  total: number;
  perChunk: number;
  chunks: number;
  chunksPerShard: number;
  /** 1: StepRollouts runs the chunks itself; more: one child per shard. */
  shards: number;
  /** Chunks in flight in each executing shard. */
  windowPerShard: number;
}

/** How a step of `total` rollouts is cut; the same plan in the workflow, in `ratchet check` and in the bench. */
export function fanoutPlan(total: number, o: { rollouts_per_chunk?: number; chunks_per_shard?: number; max_concurrent_rollouts: number }): FanoutPlan {
  const perChunk = o.rollouts_per_chunk || ROLLOUTS_PER_CHUNK.default;
  const chunks = Math.ceil(total / perChunk);
  // Unset: shards of 64 chunks, at most AUTO_SHARDS of them (./chunkBounds.ts). Configs before 0.7 always
  // carry a number (the schema's default then), so a step started then plans as it did.
  const chunksPerShard = o.chunks_per_shard ?? Math.max(CHUNKS_PER_SHARD.default, Math.ceil(chunks / AUTO_SHARDS));
  const shards = Math.max(1, Math.ceil(chunks / chunksPerShard));
  const windowChunks = Math.max(1, Math.ceil(o.max_concurrent_rollouts / perChunk));
  const windowPerShard = Math.max(1, Math.min(Math.ceil(windowChunks / shards), chunksPerShard, chunks));
  return { total, perChunk, chunks, chunksPerShard, shards, windowPerShard };
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
