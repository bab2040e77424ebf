/**
 * The config's bounds on chunks and shards (orchestrator.rollouts_per_chunk, chunks_per_shard), apart
 * from src/contracts/chunks.ts so the config schema can read them without importing the chunk contracts.
 */
/** orchestrator.rollouts_per_chunk: the default, and its bounds (0 = one activity per rollout, the pre-0.6 path). */
export const ROLLOUTS_PER_CHUNK = { default: 16, min: 1, max: 64 } as const;
/** orchestrator.chunks_per_shard: the default, and its bounds. */
export const CHUNKS_PER_SHARD = { default: 256, min: 1, max: 1000 } as const;
