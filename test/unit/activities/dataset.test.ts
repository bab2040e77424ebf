/**
 * Task sampling for a step (src/activities/dataset.ts sampleForStep): the permutation of an env's
 * ids is computed once per (env, epoch) since v0.7, not once per slot. The batch must be exactly
 * what the per-slot computation gave (a run resumed on new code trains on the same tasks), checked
 * against that computation written out here, and a large step must take well under a second.
 */
import { sampleForStep, seededInts, seededPermutation } from '../../../src/activities/dataset';
import type { SampleTasksInput } from '../../../src/contracts';
import { runKeys } from '../../../src/artifacts/keys';

/** The v0.6 computation, slot by slot (a fresh permutation each time), from the same seeded primitives. */
function perSlot(input: SampleTasksInput, idsByEnv: string[][], paths: string[]) {
  const weights = input.envs.map((e) => e.weight);
  const total = weights.reduce((a, b) => a + b, 0);
  const pickEnv = seededInts(`env:${input.seed}:${input.step}`);
  expect(paths).toHaveLength(idsByEnv.length);
  return Array.from({ length: input.batchSize }, (_, slot) => {
    let envIndex = 0;
    if (input.envs.length > 1) {
      let r = (pickEnv() / 2 ** 32) * total;
      while (envIndex < weights.length - 1 && r >= weights[envIndex]!) r -= weights[envIndex++]!;
    }
    const ids = idsByEnv[envIndex]!;
    const pos = input.step * input.batchSize + slot;
    const epoch = Math.floor(pos / ids.length);
    const perm = seededPermutation(ids.length, `tasks:${input.seed}:${input.envs[envIndex]!.id}:${epoch}`);
    return ids[perm[pos % ids.length]!]!;
  });
}

const ids = (prefix: string, n: number) => Array.from({ length: n }, (_, i) => `${prefix}${i}`);

describe('sampleForStep', () => {
  test('one env, batches crossing epochs: the same tasks as a permutation per slot', () => {
    const env = [{ id: 'a', dataset: 'a.jsonl', weight: 1 }];
    const pool = [ids('a', 10)];
    for (const step of [0, 1, 2, 3, 7]) {
      const input: SampleTasksInput = { runId: 'r', step, seed: 3, batchSize: 4, taskSetDir: '/t', envs: env };
      const got = sampleForStep(input, pool, ['/t/a.jsonl']);
      expect(got.map((t) => t.instanceId)).toEqual(perSlot(input, pool, ['/t/a.jsonl']));
      expect(got.map((t) => t.groupId)).toEqual(got.map((t, slot) => `s${step}-g${slot}-${t.instanceId}`));
    }
  });

  test('an epoch is every task once', () => {
    const env = [{ id: 'a', dataset: 'a.jsonl', weight: 1 }];
    const pool = [ids('a', 12)];
    const seen = [0, 1, 2].flatMap((step) => sampleForStep({ runId: 'r', step, seed: 9, batchSize: 4, taskSetDir: '/t', envs: env }, pool, ['/t/a.jsonl']).map((t) => t.instanceId));
    expect([...seen].sort()).toEqual([...pool[0]!].sort());
  });

  test('two envs of the same id and different sizes: each its own permutation', () => {
    const envs = [{ id: 'x', dataset: 'a.jsonl', weight: 1 }, { id: 'x', dataset: 'b.jsonl', weight: 2 }];
    const pool = [ids('a', 5), ids('b', 7)];
    const input: SampleTasksInput = { runId: 'r', step: 2, seed: 1, batchSize: 16, taskSetDir: '/t', envs };
    const got = sampleForStep(input, pool, ['/t/a.jsonl', '/t/b.jsonl']);
    expect(new Set(got.map((t) => t.envIndex))).toEqual(new Set([0, 1]));
    expect(got.map((t) => t.instanceId)).toEqual(perSlot(input, pool, ['/t/a.jsonl', '/t/b.jsonl']));
    for (const t of got) expect(t.instanceId.startsWith(t.envIndex === 0 ? 'a' : 'b')).toBe(true);
  });

  test('a 8,192-task step over 65,536 ids: fast, and each slot as the per-slot permutation gives', () => {
    const env = [{ id: 'big', dataset: 'big.jsonl', weight: 1 }];
    const pool = [ids('t', 65_536)];
    const input: SampleTasksInput = { runId: 'r', step: 1, seed: 5, batchSize: 8192, taskSetDir: '/t', envs: env };
    const t0 = performance.now();
    const got = sampleForStep(input, pool, ['/t/big.jsonl']);
    const ms = performance.now() - t0;
    // Per slot this was 8,192 permutations of 65,536 (minutes); once per epoch it is one.
    expect(ms).toBeLessThan(2000);
    const perm = seededPermutation(65_536, 'tasks:5:big:0');
    expect(got.map((t) => t.instanceId)).toEqual(Array.from({ length: 8192 }, (_, slot) => pool[0]![perm[8192 + slot]!]));
    expect(new Set(got.map((t) => t.instanceId)).size).toBe(8192);
  });
  test('a retrained step (epoch > 0, after a checkpoint fallback) gets group ids, so trajectory and journal keys, of its own', () => {
    const env = [{ id: 'a', dataset: 'a.jsonl', weight: 1 }];
    const pool = [ids('a', 10)];
    const input: SampleTasksInput = { runId: 'r', step: 3, seed: 3, batchSize: 4, taskSetDir: '/t', envs: env };
    const e0 = sampleForStep(input, pool, ['/t/a.jsonl']);
    const e1 = sampleForStep({ ...input, epoch: 1 }, pool, ['/t/a.jsonl']);
    const e1r = sampleForStep({ ...input, epoch: 1, round: 2 }, pool, ['/t/a.jsonl']);
    // Epoch 0 (every run without a fallback): the ids of before, so stored runs read as they did.
    expect(e0.map((t) => t.groupId)).toEqual(e0.map((t, slot) => `s3-g${slot}-${t.instanceId}`));
    expect(e1.map((t) => t.groupId)).toEqual(e0.map((t, slot) => `s3-e1-g${slot}-${t.instanceId}`));
    expect(e1r.map((t) => t.groupId)).toEqual(e1r.map((t, slot) => `s3-e1-r2-g${slot}-${t.instanceId}`));
    expect(sampleForStep({ ...input, epoch: 0 }, pool, ['/t/a.jsonl'])).toEqual(e0);
    // The same tasks: only the keys differ.
    expect(e1.map((t) => t.instanceId)).toEqual(e0.map((t) => t.instanceId));
    const keysOf = (g: string) => [runKeys.rolloutJournalTurn('r', 3, g, 0, 0, 'a1'), runKeys.trajectory('r', 3, g, 0, 'ab'.repeat(32))];
    expect(keysOf(e0[0]!.groupId)).toEqual([`runs/r/steps/3/rollouts/s3-g0-${e0[0]!.instanceId}/0.journal/turn-0000-a1.json`,
      `runs/r/steps/3/rollouts/s3-g0-${e0[0]!.instanceId}/0-${'ab'.repeat(8)}.json`]);
    expect(keysOf(e1[0]!.groupId)).toEqual([`runs/r/steps/3/rollouts/s3-e1-g0-${e0[0]!.instanceId}/0.journal/turn-0000-a1.json`,
      `runs/r/steps/3/rollouts/s3-e1-g0-${e0[0]!.instanceId}/0-${'ab'.repeat(8)}.json`]);
  });
});
