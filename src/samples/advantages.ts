/**
 * Group-relative advantages (pure). Every rollout of a task in one step forms a
 * group; its advantage is its reward minus the group's mean reward:
 *  - GRPO (DeepSeekMath): optionally divided by the group's standard deviation + eps;
 *  - Dr.GRPO (Liu et al. 2025, "Understanding R1-Zero-like training"): never divided
 *    by the std (that term biases towards easy/hard groups); its other fix, a constant
 *    length normalizer instead of 1/|o|, is the trainer's loss normalization
 *    ([trainer.loss] normalization), and the manifest records the one the trainer uses;
 *  - RLOO (Kool et al. 2019; Ahmadian et al. 2024): the baseline of each rollout is the mean of the
 *    *other* rollouts of its group, so a rollout's own reward never lowers its advantage:
 *    A_i = r_i - mean_{j != i} r_j = n/(n-1) (r_i - mean). Unbiased; never divided by the std.
 * The std is the population std (ddof = 0) of the group's rewards.
 */

export type AdvantageKind = 'grpo' | 'dr_grpo' | 'rloo';

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
  // RLOO: r_i minus the others' mean, which is n/(n-1) times r_i minus the whole group's mean.
  const scale = cfg.kind === 'rloo' && n > 1 ? n / (n - 1) : 1;
  const advantages = rewards.map((r) => (uniform ? 0 : divide ? (r - mean) / (std + STD_EPS) : scale * (r - mean)));
  return { advantages, mean, std, uniform };
}

/** The trainer's loss settings the length normalizer comes from ([trainer.loss] kind and normalization). */
export interface LossRecipe {
  kind: 'grpo' | 'gspo' | 'sft';
  normalization: 'token' | 'sequence' | 'dr_grpo';
}

/**
 * What the trainer divides a trajectory's summed token loss by (trainer/ratchet_trainer/core/loss.py).
 * It follows the loss, not the advantage: the advantage's kind says only whether the group std divides.
 * Over each mini-batch when the trainer makes several updates per batch (trainer.minibatches).
 */
export function lengthNormalizer(loss: LossRecipe | undefined, seqLen: number): Record<string, unknown> {
  if (!loss) return { kind: 'unrecorded' };
  // GSPO's ratio and objective are per trajectory (exp of its mean log-ratio), then a mean over trajectories.
  if (loss.kind === 'gspo' || loss.normalization === 'sequence') return { kind: 'per_trajectory_tokens' };
  // Dr.GRPO: the summed token loss over a constant, trajectories x seq_len (the trainer's max_tokens).
  if (loss.normalization === 'dr_grpo') return { kind: 'constant', value: seqLen, per: 'trajectory' };
  return { kind: 'batch_tokens' }; // token: a mean over the batch's trainable tokens (DAPO)
}

/** What the manifest says about how advantages were made, so the trainer and a reader can check. */
export function advantageRecipe(cfg: AdvantageConfig, seqLen: number, loss?: LossRecipe): Record<string, unknown> {
  return {
    kind: cfg.kind,
    baseline: cfg.kind === 'rloo' ? 'leave_one_out_mean' : 'group_mean',
    std_normalize: cfg.kind === 'grpo' && cfg.std_normalize,
    std: 'population',
    std_eps: STD_EPS,
    drop_uniform_groups: cfg.drop_uniform_groups,
    length_normalizer: lengthNormalizer(loss, seqLen),
  };
}
