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

/**
 * What the batch's plan needs of a rollout before any of its tokens: its identity, how it ended and its
 * score. A RolloutSummary carries all of it, so buildBatch plans a step without reading a trajectory and
 * then reads them one window at a time (buildBatchStreaming): its peak memory does not grow with the
 * number of rollouts beyond the batch it writes.
 */
export interface RolloutHeader {
  group_id: string;
  task_id: string;
  rollout_index: number;
  sha256: string;
  stop_reason: Trajectory['stop_reason'];
  /** The scorer's reward (RolloutSummary), else the trajectory's own. */
  reward?: { total: number; components: Record<string, number> };
}

export const headerOf = (x: BuilderInput): RolloutHeader => ({
  group_id: x.trajectory.group_id, task_id: x.trajectory.task_id, rollout_index: x.trajectory.rollout_index, sha256: x.sha256,
  stop_reason: x.trajectory.stop_reason, ...(x.reward ?? x.trajectory.reward ? { reward: x.reward ?? x.trajectory.reward } : {}),
});

function compareHeaders(a: RolloutHeader, b: RolloutHeader): number {
  const ka = [a.group_id, a.task_id];
  const kb = [b.group_id, b.task_id];
  for (let i = 0; i < ka.length; i++) if (ka[i] !== kb[i]) return ka[i]! < kb[i]! ? -1 : 1;
  if (a.rollout_index !== b.rollout_index) return a.rollout_index - b.rollout_index;
  return a.sha256 < b.sha256 ? -1 : a.sha256 > b.sha256 ? 1 : 0;
}

function zeroCounts<K extends string>(keys: readonly K[]): Record<K, number> {
  return Object.fromEntries(keys.map((k) => [k, 0])) as Record<K, number>;
}

/** Every trajectory in memory at once: the builder's pure form (tests, goldens, benchmarks). */
export function buildBatchFromTrajectories(inputs: readonly BuilderInput[], cfg: BuilderConfig, tok: ModelTokenizer, ctx: BuildContext): BuiltBatch {
  const b = new BatchBuilder(inputs.map(headerOf), cfg, tok, ctx);
  for (const i of b.order) b.add(i, inputs[i]!.trajectory, inputs[i]!.label);
  return b.finish();
}

/**
 * The same batch as buildBatchFromTrajectories, reading each trajectory with `load` when its turn comes, at
 * most `window` ahead: only the window's trajectories and the samples built so far are in memory.
 * `onTrajectory(done, total)` after each one (the activity's progress).
 */
export async function buildBatchStreaming(headers: readonly RolloutHeader[], load: (i: number) => Promise<{ trajectory: Trajectory; label: string }>,
  cfg: BuilderConfig, tok: ModelTokenizer, ctx: BuildContext, opts: { window?: number; onTrajectory?: (done: number, total: number) => void } = {}): Promise<BuiltBatch> {
  const b = new BatchBuilder(headers, cfg, tok, ctx);
  const window = Math.max(1, opts.window ?? 16);
  const pending: Promise<{ trajectory: Trajectory; label: string }>[] = [];
  let next = 0;
  for (let k = 0; k < b.order.length; k++) {
    while (next < b.order.length && next < k + window) {
      const p = load(b.order[next++]!);
      p.catch(() => { /* observed when its turn comes */ });
      pending.push(p);
    }
    const { trajectory, label } = await pending.shift()!;
    b.add(b.order[k]!, trajectory, label);
    opts.onTrajectory?.(k + 1, b.order.length);
  }
  return b.finish();
}

type Sample = PackedSample & { meta: Omit<ManifestSample, 'index' | 'offset' | 'tokens' | 'trainable_tokens'> };

/** Plans a batch from its rollouts' headers (groups, advantages, what is dropped), then takes their trajectories in `order`. */
class BatchBuilder {
  /** The rollouts' indices in the batch's order (group, task, rollout index, sha256): trajectories are added in it. */
  readonly order: number[];
  private readonly out: (DropCause | undefined)[] = [];
  private readonly rewardOf: (RolloutHeader['reward'])[] = [];
  private readonly advantage: number[] = [];
  private readonly inUniformGroup: boolean[] = [];
  private readonly groups = new Map<string, number[]>();
  private uniformGroups = 0;
  private readonly dropped = zeroCounts(DROP_CAUSES);
  private readonly breaks = zeroCounts<NonPrefixCause>(['template_rewrote_history', 'assistant_retokenized', 'stop_token_not_rendered']);
  private readonly samples: Sample[] = [];
  private retokenizedRollouts = 0;
  private trajectories = 0;
  private truncatedSamples = 0;
  private readonly staleness: number[] = [];
  private sampling: Trajectory['sampling'] | undefined;
  private added = 0;

  constructor(private readonly headers: readonly RolloutHeader[], private readonly cfg: BuilderConfig, private readonly tok: ModelTokenizer, private readonly ctx: BuildContext) {
    this.order = headers.map((_, i) => i).sort((a, b) => compareHeaders(headers[a]!, headers[b]!));
    // Rewards and group advantages, per rollout. An infrastructure failure or a task that could
    // not be set up has no reward: it never enters a group's baseline. Nor, under limit_ended = "mask",
    // does an episode cut off at a limit: its score says where the limit was, not how good the policy is.
    for (const i of this.order) {
      const h = headers[i]!;
      this.out[i] = outOfBaseline(h.stop_reason, cfg.limit_ended);
      this.rewardOf[i] = this.out[i] ? undefined : h.reward;
      this.advantage[i] = 0;
      this.inUniformGroup[i] = false;
      if (this.rewardOf[i] === undefined) continue;
      const g = this.groups.get(h.group_id) ?? [];
      g.push(i);
      this.groups.set(h.group_id, g);
    }
    for (const members of this.groups.values()) {
      const ga = groupAdvantages(members.map((i) => this.rewardOf[i]!.total), cfg.advantage);
      if (ga.uniform) this.uniformGroups++;
      members.forEach((i, j) => {
        this.advantage[i] = ga.advantages[j]!;
        this.inUniformGroup[i] = ga.uniform;
      });
    }
  }

  /** Rollout i's samples, from its trajectory; call in `order`. */
  add(i: number, traj: Trajectory, source: string): void {
    if (this.order[this.added++] !== i) throw new Error(`BatchBuilder.add: rollout ${i} out of order`);
    const { cfg, tok, ctx, dropped } = this;
    const h = this.headers[i]!;
    if (this.sampling === undefined && traj.sampling) this.sampling = traj.sampling;
    const out = this.out[i];
    if (out) { dropped[out]++; return; }
    const label = `trajectory ${source} (task ${traj.task_id}, rollout ${traj.rollout_index})`;
    const { turns, retokenized } = completeTurns(traj, tok, cfg.allow_retokenize, label);
    if (retokenized) this.retokenizedRollouts++;
    const asm = assembleTrajectory(turns, tok, cfg.non_prefix_policy, label);
    for (const b of asm.breaks) this.breaks[b.cause]++;
    const reward = this.rewardOf[i];
    const episodeTruncated = asm.segments.some((s) => s.lengthFinished);
    const trajectory = this.trajectories;
    let kept = 0;
    asm.segments.forEach((seg, segIdx) => {
      if (!reward) { dropped.missing_reward++; return; }
      if (this.inUniformGroup[i] && cfg.advantage.drop_uniform_groups) { dropped.uniform_group++; return; }
      const stale = ctx.trainerPolicyVersion - seg.minPolicyVersion;
      if (stale < 0) {
        throw new BatchBuildError('FutureRollout', `${label}: turns ${seg.firstTurn}..${seg.lastTurn} were sampled by policy version ${seg.minPolicyVersion}, ` +
          `newer than the trainer's ${ctx.trainerPolicyVersion}: the trainer was restored from an older checkpoint than the rollouts. ` +
          'Fix: resume the run from its latest checkpoint, or discard rollouts made after it');
      }
      if (stale > cfg.async_level) { dropped.stale++; return; }
      const fit = fitToSeqLen(seg, cfg.seq_len, cfg.mask_truncated_completions, episodeTruncated);
      if (fit.cut || fit.masked) this.truncatedSamples++;
      if (fit.trainable === 0) {
        if (fit.masked) dropped.truncated_masked++;
        else dropped.no_trainable_tokens++;
        return;
      }
      this.staleness.push(stale);
      kept++;
      // Typed copies: the trajectory (its prompts repeat every earlier turn) is let go once this returns.
      this.samples.push({
        ids: Int32Array.from(fit.segment.ids), mask: Uint8Array.from(fit.segment.mask), logprobs: Float32Array.from(fit.segment.logprobs),
        advantage: this.advantage[i]!, trainable: fit.trainable,
        trajectory,
        meta: {
          task_id: traj.task_id, group_id: traj.group_id, rollout_index: traj.rollout_index,
          turns: [seg.firstTurn, seg.lastTurn], segment: segIdx, trajectory, policy_version: seg.minPolicyVersion, staleness: stale,
          reward: reward.total, reward_components: reward.components, advantage: this.advantage[i]!,
          truncated: fit.cut || fit.masked, retokenized, trajectory_sha256: h.sha256,
        },
      });
    });
    if (kept > 0) this.trajectories++;
  }

  finish(): BuiltBatch {
    if (this.added !== this.order.length) throw new Error(`BatchBuilder.finish: ${this.added} of ${this.order.length} rollouts added`);
    const { cfg, tok, ctx, samples, dropped, breaks, groups, staleness } = this;
    const sorted = this.order.map((i) => this.headers[i]!);
    const out = this.order.map((i) => this.out[i]);
    const rewardOf = this.order.map((i) => this.rewardOf[i]);
    const { retokenizedRollouts, truncatedSamples, trajectories, uniformGroups } = this;
    const packed = packSamples(samples);
    const manifestSamples: ManifestSample[] = samples.map((s, j) => ({
      index: j, offset: packed.offsets[j]!, tokens: s.ids.length, trainable_tokens: s.trainable, ...s.meta,
    }));

    // The step's score counts masked limit-ended episodes too: they were scored, only not trained on.
    const rewarded = sorted.filter((_, i) => out[i] !== 'infrastructure' && out[i] !== 'task_setup').map((h) => h.reward)
      .filter((r): r is NonNullable<typeof r> => r !== undefined);
    const informativeGroups = groupSignal(sorted.map((x, i) => ({
      group_id: x.group_id, stop_reason: x.stop_reason, reward: rewardOf[i]?.total ?? 0,
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
      distribution_match: this.sampling?.distribution_match ?? 'unrecorded',
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
      sampling: this.sampling ?? null,
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
}
