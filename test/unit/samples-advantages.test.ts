import { parseRunConfig } from '../../src/config/load';
import { advantageRecipe, groupAdvantages, lengthNormalizer, STD_EPS } from '../../src/samples/advantages';

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
