/**
 * Group-relative advantages (pure). Every rollout of a task in one step forms a
 * group; its advantage is its reward minus the group's mean reward:
 *  - GRPO (DeepSeekMath): optionally divided by the group's standard deviation + eps;
 *  - Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): never divided
 *    by the std (that term biases towards easy/hard groups); its other fix, a constant
 *    length normalizer instead of 1/|o|, is the trainer's loss normalization, and the
 *    manifest records it.
 * The std is the population std (ddof = 0) of the group's rewards.
 */

export type AdvantageKind = 'grpo' | 'dr_grpo';

export interface AdvantageConfig {
  kind: AdvantageKind;
  std_normalize: boolean;
  drop_uniform_groups: boolean;
}

/** Added to the std so a near-uniform group does not blow its advantages up (TRL uses the same value). */
export const STD_EPS = 1e-4;

/** Rewards closer than this count as equal: such a group carries no learning signal. */
export const UNIFORM_TOL = 1e-9;

export interface GroupAdvantages {
  advantages: number[];
  mean: number;
  std: number;
  /** Every reward equal: no learning signal, advantages all 0. */
  uniform: boolean;
}

export function groupAdvantages(rewards: readonly number[], cfg: Pick<AdvantageConfig, 'kind' | 'std_normalize'>): GroupAdvantages {
  const n = rewards.length;
  if (n === 0) return { advantages: [], mean: 0, std: 0, uniform: true };
  for (const r of rewards) {
    if (!Number.isFinite(r)) throw new RangeError(`reward ${r} is not a finite number; the scorer must return finite rewards`);
  }
  const mean = rewards.reduce((a, b) => a + b, 0) / n;
  const std = Math.sqrt(rewards.reduce((a, r) => a + (r - mean) * (r - mean), 0) / n);
  const uniform = Math.max(...rewards) - Math.min(...rewards) <= UNIFORM_TOL;
  const divide = cfg.kind === 'grpo' && cfg.std_normalize;
  const advantages = rewards.map((r) => (uniform ? 0 : divide ? (r - mean) / (std + STD_EPS) : r - mean));
  return { advantages, mean, std, uniform };
}

/** What the manifest says about how advantages were made, so the trainer and a reader can check. */
export function advantageRecipe(cfg: AdvantageConfig, seqLen: number): Record<string, unknown> {
  return {
    kind: cfg.kind,
    baseline: 'group_mean',
    std_normalize: cfg.kind === 'grpo' && cfg.std_normalize,
    std: 'population',
    std_eps: STD_EPS,
    drop_uniform_groups: cfg.drop_uniform_groups,
    // Dr.GRPO divides the summed token loss by a constant, not by each sample's length.
    length_normalizer: cfg.kind === 'dr_grpo' ? { kind: 'constant', value: seqLen } : { kind: 'per_sample_tokens' },
  };
}
