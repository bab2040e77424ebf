import { parseRunConfig } from '../../../src/config/load';
import { advantageRecipe, groupAdvantages, lengthNormalizer, STD_EPS } from '../../../src/samples/advantages';

describe('group-relative advantages', () => {
  const sd = (xs: number[]) => { const m = xs.reduce((a, b) => a + b, 0) / xs.length; return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / xs.length); };
  test.each([
    // [name, rewards, kind, std_normalize, expected advantages, uniform]
    ['grpo, no std', [1, 0, 0, 1], 'grpo', false, [0.5, -0.5, -0.5, 0.5], false],
    ['grpo, std', [1, 0, 0, 1], 'grpo', true, [0.5 / (0.5 + STD_EPS), -0.5 / (0.5 + STD_EPS), -0.5 / (0.5 + STD_EPS), 0.5 / (0.5 + STD_EPS)], false],
    ['grpo, std, skewed', [3, 0, 0, 0], 'grpo', true, [3, 0, 0, 0].map((r) => (r - 0.75) / (sd([3, 0, 0, 0]) + STD_EPS)), false],
    ['dr_grpo ignores std_normalize', [1, 0, 0, 1], 'dr_grpo', true, [0.5, -0.5, -0.5, 0.5], false],
    ['uniform group', [0.7, 0.7, 0.7], 'grpo', true, [0, 0, 0], true],
    ['single rollout', [2], 'grpo', true, [0], true],
    ['negative rewards', [-1, -3], 'dr_grpo', false, [1, -1], false],
  ] as const)('%s', (_name, rewards, kind, std, expected, uniform) => {
    const ga = groupAdvantages(rewards, { kind, std_normalize: std });
    expect(ga.uniform).toBe(uniform);
    ga.advantages.forEach((a, i) => expect(a).toBeCloseTo(expected[i]!, 10));
    expect(ga.advantages.reduce((a, b) => a + b, 0)).toBeCloseTo(0, 10);
  });

  test('an empty group has no advantages', () => {
    expect(groupAdvantages([], { kind: 'grpo', std_normalize: true })).toEqual({ advantages: [], mean: 0, std: 0, uniform: true });
  });

  test('a non-finite reward is refused', () => {
    expect(() => groupAdvantages([1, NaN], { kind: 'grpo', std_normalize: true })).toThrow(/reward NaN is not a finite number/);
  });

  test('the manifest records the length normalizer the trainer uses, which follows the loss, not the advantage', () => {
    // Defaults: advantage kind "grpo" and loss normalization "dr_grpo": the trainer divides by
    // trajectories x seq_len (before, the manifest said per_sample_tokens from the advantage kind).
    const c = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
    expect(advantageRecipe(c.orchestrator.advantage, c.orchestrator.seq_len, c.trainer.loss)).toMatchObject({
      kind: 'grpo', std_normalize: true, length_normalizer: { kind: 'constant', value: c.orchestrator.seq_len, per: 'trajectory' },
    });
    expect(advantageRecipe({ kind: 'dr_grpo', std_normalize: true, drop_uniform_groups: false }, 1024, { kind: 'grpo', normalization: 'dr_grpo' })).toMatchObject({
      kind: 'dr_grpo', std_normalize: false, length_normalizer: { kind: 'constant', value: 1024, per: 'trajectory' },
    });
    const grpo = { kind: 'grpo', std_normalize: true, drop_uniform_groups: true } as const;
    expect(advantageRecipe(grpo, 1024, { kind: 'grpo', normalization: 'token' })).toMatchObject({
      std_normalize: true, drop_uniform_groups: true, length_normalizer: { kind: 'batch_tokens' },
    });
    expect(lengthNormalizer({ kind: 'grpo', normalization: 'sequence' }, 1024)).toEqual({ kind: 'per_trajectory_tokens' });
    expect(lengthNormalizer({ kind: 'gspo', normalization: 'dr_grpo' }, 1024)).toEqual({ kind: 'per_trajectory_tokens' });
    expect(lengthNormalizer(undefined, 1024)).toEqual({ kind: 'unrecorded' });
  });
});

describe('RLOO (leave-one-out) advantages', () => {
  // Independent of groupAdvantages' closed form: for each rollout, loop over the others and average them.
  const bruteForce = (rewards: readonly number[]): number[] => rewards.map((ri, i) => {
    let sum = 0;
    let count = 0;
    for (let j = 0; j < rewards.length; j++) {
      if (j === i) continue;
      sum += rewards[j]!;
      count++;
    }
    return ri - sum / count;
  });

  test.each([
    [[1, 0, 0, 0]],
    [[1, 0, 0, 1]],
    [[-0.25, -0.5, 1, -0.5, 0.3]],
    [[2, -3]],
    [[0.1, 0.7, 0.7, 0.7, 0.2, 0.9, 0, 1]],
  ])('%j: each advantage is r_i minus the mean of the other rewards', (rewards) => {
    const ga = groupAdvantages(rewards, { kind: 'rloo', std_normalize: true });
    expect(ga.uniform).toBe(false);
    const expected = bruteForce(rewards);
    ga.advantages.forEach((a, i) => expect(a).toBeCloseTo(expected[i]!, 12));
  });

  test('seeded random groups agree with the brute force, and differ from the plain group-mean baseline', () => {
    let s = 7;
    const rand = () => { s = (s * 1103515245 + 12345) % 2 ** 31; return s / 2 ** 31; };
    for (let t = 0; t < 50; t++) {
      const n = 2 + Math.floor(rand() * 14);
      const rewards = Array.from({ length: n }, () => Math.round(rand() * 4) / 4 - 0.5);
      const ga = groupAdvantages(rewards, { kind: 'rloo', std_normalize: false });
      const dr = groupAdvantages(rewards, { kind: 'dr_grpo', std_normalize: false });
      if (ga.uniform) { expect(ga.advantages.every((a) => a === 0)).toBe(true); continue; }
      const expected = bruteForce(rewards);
      ga.advantages.forEach((a, i) => expect(a).toBeCloseTo(expected[i]!, 12));
      // Larger than the group-mean baseline by n/(n-1) wherever it is not 0.
      ga.advantages.forEach((a, i) => expect(Math.abs(a)).toBeGreaterThanOrEqual(Math.abs(dr.advantages[i]!) - 1e-12));
    }
  });

  test('a uniform group and a group of one carry no signal', () => {
    expect(groupAdvantages([0.5, 0.5, 0.5], { kind: 'rloo', std_normalize: false }).advantages).toEqual([0, 0, 0]);
    expect(groupAdvantages([1], { kind: 'rloo', std_normalize: false })).toMatchObject({ advantages: [0], uniform: true });
  });

  test('the manifest names the leave-one-out baseline and no std division', () => {
    expect(advantageRecipe({ kind: 'rloo', std_normalize: true, drop_uniform_groups: false }, 1024, { kind: 'grpo', normalization: 'dr_grpo' })).toMatchObject({
      kind: 'rloo', baseline: 'leave_one_out_mean', std_normalize: false,
    });
  });

  test('config: kind = "rloo" parses; std_normalize = true with it is refused with a fix', () => {
    const c = parseRunConfig('[orchestrator.advantage]\nkind = "rloo"\n[[env]]\nid = "swe-grep"\n', 'x.toml');
    expect(c.orchestrator.advantage.kind).toBe('rloo');
    expect(() => parseRunConfig('[orchestrator.advantage]\nkind = "rloo"\nstd_normalize = true\n[[env]]\nid = "swe-grep"\n', 'x.toml'))
      .toThrow(/std_normalize.*rloo.*Fix:/s);
  });
});
