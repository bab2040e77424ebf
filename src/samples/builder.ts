import type { SamplingRecord, Trajectory } from '../contracts/trajectory';
import { advantageRecipe, groupAdvantages, type AdvantageConfig, type LossRecipe } from './advantages';
import { assembleTrajectory, type NonPrefixCause, type NonPrefixPolicy } from './assemble';
import { BatchBuildError } from './errors';
import { groupSignal, outOfBaseline, type LimitEnded } from './groupSignal';
import { fitToSeqLen } from './mask';
import { packSamples, type PackedSample } from './pack';
import { completeTurns } from './retokenize';
import type { Tensor } from './safetensors';
import type { ModelTokenizer } from './tokenizer';

/**
 * The sample builder (pure given its inputs): trajectories in, the packed batch's
 * tensors and manifest out. Deterministic: the output depends only on the
 * trajectories' content and the config, never on their order or on timing.
 */

export const BATCH_FORMAT = 'ratchet.batch/v1';

export type BuilderConfig = {
  seq_len: number;
  mask_truncated_completions: boolean;
  async_level: number;
  advantage: AdvantageConfig;
  non_prefix_policy: NonPrefixPolicy;
  allow_retokenize: boolean;
  /** Episodes that ended at a turn, tool-call, context or token limit: scored like any (default), or masked out of the loss and the baseline. */
  limit_ended?: LimitEnded;
  /** The trainer's loss, for the manifest's length normalizer; absent: recorded as "unrecorded". */
  loss?: LossRecipe;
};

export interface BuilderInput {
  trajectory: Trajectory;
  /** Where it came from, for messages (its artifact uri). */
  label: string;
  sha256: string;
  /** The scorer's reward when it arrived beside the trajectory (RolloutSummary); else the trajectory's own. */
  reward?: { total: number; components: Record<string, number> };
}

export interface BuildContext {
  runId: string;
  step: number;
  trainerPolicyVersion: number;
  modelName: string;
}

/**
 * `infrastructure`: the rollout ended on an infrastructure failure (stop_reason infra_error);
 * `task_setup`: its task could not be set up (stop_reason setup_error); `limit_ended`: the episode ended at
 * a limit and `limit_ended = "mask"` leaves it out. All three counted per rollout.
 */
export type DropCause = 'missing_reward' | 'uniform_group' | 'stale' | 'truncated_masked' | 'no_trainable_tokens' | 'infrastructure' | 'task_setup' | 'limit_ended';
export const DROP_CAUSES: readonly DropCause[] = ['missing_reward', 'uniform_group', 'stale', 'truncated_masked', 'no_trainable_tokens', 'infrastructure', 'task_setup', 'limit_ended'];

export interface ManifestSample {
  index: number;
  offset: number;
  tokens: number;
  trainable_tokens: number;
  task_id: string;
  group_id: string;
  rollout_index: number;
  /** Which turns of the trajectory this sample holds (inclusive); one trajectory may give several samples when split. */
  turns: [number, number];
  segment: number;
  /** The trajectory this sample belongs to (0.. in batch order): the trainer weighs trajectories, not segments. */
  trajectory: number;
  policy_version: number;
  staleness: number;
  reward: number;
  reward_components: Record<string, number>;
  advantage: number;
  truncated: boolean;
  retokenized: boolean;
  trajectory_sha256: string;
}

/** What became of a batch's rollouts: in the stored manifest and in the step's stats alike (a type alias, like BatchStats). */
export type BatchCounts = {
  rollouts: number;
  uniform_groups: number;
  /** Groups with at least two baseline members whose rewards differ: the only ones with a non-zero advantage. */
  informative_groups: number;
  dropped: Record<DropCause, number>;
  non_prefix_breaks: Record<NonPrefixCause, number>;
  retokenized_rollouts: number;
  truncated_samples: number;
};

export interface BatchManifest extends BatchCounts {
  format: typeof BATCH_FORMAT;
  run_id: string;
  step: number;
  trainer_policy_version: number;
  model: string;
  model_path: string;
  tokenizer_sha256: string;
  chat_template_sha256: string;
  vocab_size: number;
  seq_len: number;
  num_samples: number;
  num_trajectories: number;
  /** How the rollouts were sampled, and whether the trainer can reproduce that distribution (null: not recorded). */
  sampling: SamplingRecord | null;
  total_tokens: number;
  trainable_tokens: number;
  advantage: Record<string, unknown>;
  mask_truncated_completions: boolean;
  async_level: number;
  non_prefix_policy: NonPrefixPolicy;
  /** Limit-ended episodes scored ("score") or left out of the loss and the baseline ("mask"). */
  limit_ended: LimitEnded;
  groups: number;
  samples: ManifestSample[];
}

/** A type alias, not an interface, so it fits the workflow's open `summary` record. */
export type BatchStats = BatchCounts & {
  samples: number;
  tokens: number;
  trainable_tokens: number;
  /** Over every rollout that has a reward, kept or dropped: the step's score. */
  mean_reward: number;
  components_mean: Record<string, number>;
  mean_staleness: number;
  max_staleness: number;
  /**
   * "exact", "truncated" (top_p < 1 or top_k > 0: the trainer does not rebuild the truncated distribution),
   * "grammar_constrained" (tool_choice = required: the trainer cannot apply the grammar mask) or "unrecorded".
   */
  distribution_match: string;
};

export interface BuiltBatch {
  tensors: Record<string, Tensor>;
  manifest: BatchManifest;
  stats: BatchStats;
}

function compareInputs(a: BuilderInput, b: BuilderInput): number {
  const ka = [a.trajectory.group_id, a.trajectory.task_id];
  const kb = [b.trajectory.group_id, b.trajectory.task_id];
  for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i]! < kb[i]! ? -1 : 1;
  if (a.trajectory.rollout_index !== b.trajectory.rollout_index) return a.trajectory.rollout_index - b.trajectory.rollout_index;
  return a.sha256 < b.sha256 ? -1 : a.sha256 > b.sha256 ? 1 : 0;
}

function zeroCounts<K extends string>(keys: readonly K[]): Record<K, number> {
  return Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
}

export function buildBatchFromTrajectories(inputs: readonly BuilderInput[], cfg: BuilderConfig, tok: ModelTokenizer, ctx: BuildContext): BuiltBatch {
  const sorted = [...inputs].sort(compareInputs);
  const dropped = zeroCounts(DROP_CAUSES);
  const breaks = zeroCounts<NonPrefixCause>(['template_rewrote_history', 'assistant_retokenized', 'stop_token_not_rendered']);

  // Rewards and group advantages, per rollout. An infrastructure failure or a task that could
  // not be set up has no reward: it never enters a group's baseline. Nor, under limit_ended = "mask",
  // does an episode cut off at a limit: its score says where the limit was, not how good the policy is.
  const out = sorted.map((x) => outOfBaseline(x.trajectory.stop_reason, cfg.limit_ended));
  const scoreOf = (x: BuilderInput) => x.reward ?? x.trajectory.reward;
  const rewardOf = sorted.map((x, i) => (out[i] ? undefined : scoreOf(x)));
  const groups = new Map<string, number[]>();
  sorted.forEach((x, i) => {
    if (rewardOf[i] === undefined) return;
    const g = groups.get(x.trajectory.group_id) ?? [];
    g.push(i);
    groups.set(x.trajectory.group_id, g);
  });
  const advantage = new Array<number>(sorted.length).fill(0);
  const inUniformGroup = new Array<boolean>(sorted.length).fill(false);
  let uniformGroups = 0;
  for (const members of groups.values()) {
    const ga = groupAdvantages(members.map((i) => rewardOf[i]!.total), cfg.advantage);
    if (ga.uniform) uniformGroups++;
    members.forEach((i, j) => {
      advantage[i] = ga.advantages[j]!;
      inUniformGroup[i] = ga.uniform;
    });
  }

  const samples: (PackedSample & { meta: Omit<ManifestSample, 'index' | 'offset' | 'tokens' | 'trainable_tokens'> })[] = [];
  let retokenizedRollouts = 0;
  let trajectories = 0;
  let truncatedSamples = 0;
  const staleness: number[] = [];
  sorted.forEach((x, i) => {
    const traj = x.trajectory;
    if (out[i]) { dropped[out[i]]++; return; }
    const label = `trajectory ${x.label} (task ${traj.task_id}, rollout ${traj.rollout_index})`;
    const { turns, retokenized } = completeTurns(traj, tok, cfg.allow_retokenize, label);
    if (retokenized) retokenizedRollouts++;
    const asm = assembleTrajectory(turns, tok, cfg.non_prefix_policy, label);
    for (const b of asm.breaks) breaks[b.cause]++;
    const reward = rewardOf[i];
    const episodeTruncated = asm.segments.some((s) => s.lengthFinished);
    const trajectory = trajectories;
    let kept = 0;
    asm.segments.forEach((seg, segIdx) => {
      if (!reward) { dropped.missing_reward++; return; }
      if (inUniformGroup[i] && cfg.advantage.drop_uniform_groups) { dropped.uniform_group++; return; }
      const stale = ctx.trainerPolicyVersion - seg.minPolicyVersion;
      if (stale < 0) {
        throw new BatchBuildError('FutureRollout', `${label}: turns ${seg.firstTurn}..${seg.lastTurn} were sampled by policy version ${seg.minPolicyVersion}, ` +
          `newer than the trainer's ${ctx.trainerPolicyVersion}: the trainer was restored from an older checkpoint than the rollouts. ` +
          'Fix: resume the run from its latest checkpoint, or discard rollouts made after it');
      }
      if (stale > cfg.async_level) { dropped.stale++; return; }
      const fit = fitToSeqLen(seg, cfg.seq_len, cfg.mask_truncated_completions, episodeTruncated);
      if (fit.cut || fit.masked) truncatedSamples++;
      if (fit.trainable === 0) {
        if (fit.masked) dropped.truncated_masked++;
        else dropped.no_trainable_tokens++;
        return;
      }
      staleness.push(stale);
      kept++;
      samples.push({
        ids: fit.segment.ids, mask: fit.segment.mask, logprobs: fit.segment.logprobs, advantage: advantage[i]!, trainable: fit.trainable,
        trajectory,
        meta: {
          task_id: traj.task_id, group_id: traj.group_id, rollout_index: traj.rollout_index,
          turns: [seg.firstTurn, seg.lastTurn], segment: segIdx, trajectory, policy_version: seg.minPolicyVersion, staleness: stale,
          reward: reward.total, reward_components: reward.components, advantage: advantage[i]!,
          truncated: fit.cut || fit.masked, retokenized, trajectory_sha256: x.sha256,
        },
      });
    });
    if (kept > 0) trajectories++;
  });

  const packed = packSamples(samples);
  const manifestSamples: ManifestSample[] = samples.map((s, j) => ({
    index: j, offset: packed.offsets[j]!, tokens: s.ids.length, trainable_tokens: s.trainable, ...s.meta,
  }));

  // The step's score counts masked limit-ended episodes too: they were scored, only not trained on.
  const rewarded = sorted.filter((x, i) => out[i] !== 'infrastructure' && out[i] !== 'task_setup').map(scoreOf)
    .filter((r): r is NonNullable<typeof r> => r !== undefined);
  const informativeGroups = groupSignal(sorted.map((x, i) => ({
    group_id: x.trajectory.group_id, stop_reason: x.trajectory.stop_reason, reward: rewardOf[i]?.total ?? 0,
  })), cfg.limit_ended).informative.length;
  const componentsMean: Record<string, number> = {};
  const componentKeys = [...new Set(rewarded.flatMap((r) => Object.keys(r.components)))].sort();
  for (const k of componentKeys) {
    const vals = rewarded.map((r) => r.components[k]).filter((v): v is number => v !== undefined);
    componentsMean[k] = vals.reduce((a, b) => a + b, 0) / vals.length;
  }
  const stats: BatchStats = {
    samples: samples.length,
    tokens: packed.totalTokens,
    trainable_tokens: packed.trainableTokens,
    rollouts: sorted.length,
    dropped,
    non_prefix_breaks: breaks,
    uniform_groups: uniformGroups,
    informative_groups: informativeGroups,
    retokenized_rollouts: retokenizedRollouts,
    truncated_samples: truncatedSamples,
    mean_reward: rewarded.length ? rewarded.reduce((a, r) => a + r.total, 0) / rewarded.length : 0,
    components_mean: componentsMean,
    mean_staleness: staleness.length ? staleness.reduce((a, b) => a + b, 0) / staleness.length : 0,
    max_staleness: staleness.length ? Math.max(...staleness) : 0,
    distribution_match: sorted.find((x) => x.trajectory.sampling)?.trajectory.sampling?.distribution_match ?? 'unrecorded',
  };
  const manifest: BatchManifest = {
    format: BATCH_FORMAT,
    run_id: ctx.runId,
    step: ctx.step,
    trainer_policy_version: ctx.trainerPolicyVersion,
    model: ctx.modelName,
    model_path: tok.modelPath,
    tokenizer_sha256: tok.tokenizerSha256,
    chat_template_sha256: tok.templateSha256,
    vocab_size: tok.modelVocabSize ?? tok.tokenizerVocabSize,
    seq_len: cfg.seq_len,
    num_samples: samples.length,
    num_trajectories: trajectories,
    sampling: sorted.find((x) => x.trajectory.sampling)?.trajectory.sampling ?? null,
    total_tokens: packed.totalTokens,
    trainable_tokens: packed.trainableTokens,
    advantage: advantageRecipe(cfg.advantage, cfg.seq_len, cfg.loss),
    mask_truncated_completions: cfg.mask_truncated_completions,
    async_level: cfg.async_level,
    non_prefix_policy: cfg.non_prefix_policy,
    rollouts: sorted.length,
    groups: groups.size,
    uniform_groups: uniformGroups,
    informative_groups: informativeGroups,
    limit_ended: cfg.limit_ended ?? 'score',
    dropped,
    non_prefix_breaks: breaks,
    retokenized_rollouts: retokenizedRollouts,
    truncated_samples: truncatedSamples,
    samples: manifestSamples,
  };
  return { tensors: packed.tensors, manifest, stats };
}
