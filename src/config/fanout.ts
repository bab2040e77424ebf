/**
 * A step's fan-out (issue 24) as the config sizes it: the bounds of orchestrator.rollouts_per_chunk and
 * chunks_per_shard, Temporal's limits they are checked against (./fanoutChecks.ts), and the plan that cuts a
 * step into chunks and shards, computed alike by StepRollouts, `ratchet check` and the bench. Pure: workflow
 * code imports it. What crosses history between StepRollouts, its shards and the worker is in
 * src/contracts/chunks.ts.
 */
/** orchestrator.rollouts_per_chunk: the default, and its bounds. */
export const ROLLOUTS_PER_CHUNK = { default: 16, min: 1, max: 64 } as const;
/**
 * orchestrator.chunks_per_shard: the default, and its bounds. Unset (0.7): at least `default` (64) chunks a
 * shard, and at most AUTO_SHARDS shards. Each shard is a workflow of its own, and a server serialises
 * the writes of one workflow's activity starts and completions: on PostgreSQL a 4,096-rollout step in
 * one StepRollouts (256 chunks) spent ~2 ms a rollout on them, over 4 shards of 64 0.7-0.9 ms; at
 * 65,536, 64 shards of 64 cost more than 16 of 256 (1.1 against 0.7 ms). BENCHMARKS.md, issue 24.
 */
export const CHUNKS_PER_SHARD = { default: 64, min: 1, max: 1000 } as const;
/** Shards an unset chunks_per_shard spreads a step over at most (beyond 16 x 64 chunks, the shards grow instead). */
export const AUTO_SHARDS = 16;

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
 * workflow tasks (measured: ~4.1 per chunk on the dev server, test/unit/workflows/stepRollouts.test.ts).
 */
export const EVENTS_PER_CHUNK = 5;
/** A shard continues as new once its history holds this many events (well below the 10,240 warning). */
export const SHARD_EVENTS_BEFORE_CONTINUE = 7_000;
/** A summary is ~0.8 KB; heartbeat details and a failed chunk's details carry at most K of them. */
export const SUMMARY_BYTES_MAX = 4 * 1024;

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
  const perChunk = o.rollouts_per_chunk ?? ROLLOUTS_PER_CHUNK.default;
  const chunks = Math.ceil(total / perChunk);
  // Unset: shards of 64 chunks, at most AUTO_SHARDS of them (above). Configs before 0.7 always
  // carry a number (the schema's default then), so a step started then plans as it did.
  const chunksPerShard = o.chunks_per_shard ?? Math.max(CHUNKS_PER_SHARD.default, Math.ceil(chunks / AUTO_SHARDS));
  const shards = Math.max(1, Math.ceil(chunks / chunksPerShard));
  const windowChunks = Math.max(1, Math.ceil(o.max_concurrent_rollouts / perChunk));
  const windowPerShard = Math.max(1, Math.min(Math.ceil(windowChunks / shards), chunksPerShard, chunks));
  return { total, perChunk, chunks, chunksPerShard, shards, windowPerShard };
}
