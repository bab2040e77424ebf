/**
 * A step's cut into chunks and shards (src/contracts/chunks.ts fanoutPlan). With chunks_per_shard
 * unset (0.7): shards of 64 chunks, at most 16 shards, then larger shards (the sizes measured best on
 * PostgreSQL, BENCHMARKS.md); a set value is used as it is (and every config from before 0.7 has one).
 */
import { fanoutPlan } from '../../../src/config/fanout';
import { RunConfig } from '../../../src/config/schema';

const parsed = (o: Record<string, number>) => RunConfig.parse({ name: 't', orchestrator: o, env: [{ id: 'swe-grep' }] }).orchestrator;

describe('fanoutPlan', () => {
  test.each([
    // rollouts, expected shards, chunks per shard
    [1024, 1, 64],
    [4096, 4, 64],
    [16_384, 16, 64],
    [65_536, 16, 256],
  ])('%i rollouts, chunks_per_shard unset: %i shard(s) of %i chunks', (total, shards, perShard) => {
    const o = parsed({ batch_size: total / 8, rollouts_per_example: 8, max_concurrent_rollouts: 4096 });
    expect(o.chunks_per_shard).toBeUndefined();
    const plan = fanoutPlan(total, o);
    expect(plan.chunks).toBe(Math.ceil(total / 16));
    expect(plan.chunksPerShard).toBe(perShard);
    expect(plan.shards).toBe(shards);
    expect(plan.shards * plan.chunksPerShard).toBeGreaterThanOrEqual(plan.chunks);
  });

  test('a set chunks_per_shard is used as it is', () => {
    const plan = fanoutPlan(65_536, parsed({ batch_size: 8192, rollouts_per_example: 8, max_concurrent_rollouts: 4096, chunks_per_shard: 64 }));
    expect(plan).toMatchObject({ chunks: 4096, chunksPerShard: 64, shards: 64, windowPerShard: 4 });
    expect(fanoutPlan(4096, { max_concurrent_rollouts: 4096, chunks_per_shard: 256 })).toMatchObject({ shards: 1, windowPerShard: 256 });
  });
});
