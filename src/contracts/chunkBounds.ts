/**
 * The config's bounds on chunks and shards (orchestrator.rollouts_per_chunk, chunks_per_shard), apart
 * from src/contracts/chunks.ts so the config schema can read them without importing the chunk contracts.
 */
/** orchestrator.rollouts_per_chunk: the default, and its bounds (0 = one activity per rollout, the pre-0.6 path). */
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
