import { z } from 'zod';
import { EVAL_STEP } from '../shared/steps';

/**
 * One rollout, as the rollout worker saves it and the batch builder reads it.
 * Token-in, token-out: each turn keeps the exact ids and logprobs the server
 * sampled, so nothing generated is ever re-tokenized.
 */

export const ToolCall = z.object({
  id: z.string(),
  type: z.literal('function').default('function'),
  function: z.object({ name: z.string(), arguments: z.string() }),
});
export type ToolCall = z.infer<typeof ToolCall>;

export const ChatMessage = z.object({
  role: z.enum(['system', 'user', 'assistant', 'tool']),
  content: z.string().nullable().default(''),
  tool_calls: z.array(ToolCall).optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
});
export type ChatMessage = z.infer<typeof ChatMessage>;

export const ToolSpec = z.object({
  type: z.literal('function'),
  function: z.object({
    name: z.string(),
    description: z.string().optional(),
    parameters: z.record(z.unknown()),
  }),
});
export type ToolSpec = z.infer<typeof ToolSpec>;

export const Turn = z.object({
  /** How many of the trajectory's messages were the prompt of this turn. */
  prompt_message_count: z.number().int().positive(),
  /** Ids the server tokenized the prompt to (vLLM `prompt_token_ids`); null if the server did not return them. */
  prompt_token_ids: z.array(z.number().int().nonnegative()).nullable(),
  /** Ids the server sampled (vLLM `token_ids`); null if the server did not return them. */
  completion_token_ids: z.array(z.number().int().nonnegative()).nullable(),
  completion_logprobs: z.array(z.number()).nullable(),
  /** The server's text of each token it gave a logprob for: lets a re-tokenized turn pair logprobs by content. */
  completion_logprob_tokens: z.array(z.string()).nullable().optional(),
  finish_reason: z.enum(['stop', 'length', 'tool_calls', 'content_filter', 'error']),
  /** Which policy produced this turn: 0 is the base model, N the adapter after N optimizer steps. */
  policy_version: z.number().int().nonnegative(),
  /**
   * The inference replica (base URL) that sampled this turn, with several replicas: a rollout whose
   * replica went down goes on on another that serves the same version (src/agent/replicaPool.ts).
   */
  replica: z.string().optional(),
  /** trainer.mode = "full": the weights directory the replica served this turn from, checked against the turn's version (src/agent/servedWeights.ts). */
  weights: z.string().optional(),
  model_ms: z.number().nonnegative(),
  tools_ms: z.number().nonnegative(),
});
export type Turn = z.infer<typeof Turn>;

/**
 * `error`: the episode ended on a failure the agent caused (e.g. it broke its sandbox) and is scored.
 * `infra_error`: the infrastructure failed (a lost container, Docker failing while scoring) on
 * every attempt: the rollout is recorded but dropped, never a reward, never in a group's baseline.
 * `setup_error`: the task could not be set up (its row, its repository snapshot, or the environment's
 * setup failed on it, the same way every time): recorded with the error and dropped like `infra_error`.
 */
export const StopReason = z.enum(['completed', 'max_tokens', 'max_tool_calls', 'max_turns', 'context_length', 'error', 'infra_error', 'setup_error']);

/** The infrastructure, not the policy, decided how the rollout ended. */
export function isInfrastructureFailure(r: { stop_reason: StopReason }): boolean {
  return r.stop_reason === 'infra_error';
}

/** The task could not be set up (missing row, bad snapshot, env.setup failed): the agent never ran. */
export function isSetupFailure(r: { stop_reason: StopReason }): boolean {
  return r.stop_reason === 'setup_error';
}

/** Rollouts that carry no reward: never scored, never in a group's baseline, dropped from the batch. */
export function isUnscored(r: { stop_reason: StopReason }): boolean {
  return isInfrastructureFailure(r) || isSetupFailure(r);
}
export type StopReason = z.infer<typeof StopReason>;

/**
 * The sampling distribution of an episode, as the run asked for it. vLLM returns the
 * logprobs of exactly this distribution (processed logprobs: after temperature and
 * top-k/top-p); the trainer scores the model's full distribution at the same temperature.
 * `distribution_match` says whether the two are the same distribution:
 * - "exact": top_p = 1 and top_k = 0: nothing narrows the vocabulary. tool_choice = "required"
 *   forces only the tool-call opening, as prompt: the policy samples the rest unconstrained;
 * - "truncated": top_p < 1 or top_k > 0: vLLM sampled from the renormalised nucleus / top-k set,
 *   which the trainer does not rebuild, so on sampled tokens pi_trainer <= pi_vllm;
 * - "grammar_constrained": trajectories before 0.8, when tool_choice = "required" masked the
 *   vocabulary to a tool call's grammar that the trainer did not apply. No longer produced.
 * Where inexact, the importance ratio sees the difference as mismatch, bounded by the
 * loss's correction (docs/training.md).
 */
export const SamplingRecord = z.object({
  temperature: z.number(),
  top_p: z.number(),
  top_k: z.number().int(),
  tool_choice: z.enum(['auto', 'required']),
  distribution_match: z.enum(['exact', 'truncated', 'grammar_constrained']),
  /** How each turn's prompt was made (TurnSampling.history); absent before 0.8: the template's rendering. */
  history: z.enum(['tokens', 'template']).optional(),
});
export type SamplingRecord = z.infer<typeof SamplingRecord>;

export function samplingRecord(s: { temperature: number; top_p: number; top_k?: number; tool_choice?: 'auto' | 'required'; history?: 'tokens' | 'template' }): SamplingRecord {
  const toolChoice = s.tool_choice ?? 'auto';
  const topK = s.top_k ?? 0;
  const truncated = s.top_p < 1 || topK > 0;
  return {
    temperature: s.temperature, top_p: s.top_p, top_k: topK, tool_choice: toolChoice, history: s.history ?? 'tokens',
    distribution_match: truncated ? 'truncated' : 'exact',
  };
}

/**
 * How a rollout's episode used an earlier attempt's journal, recorded on its trajectory.
 * `resumed`: every journaled turn replayed with the same tool outputs, and sampling went on from there;
 * `restarted-diverged`: a replayed tool output differed, so the episode started over in a fresh sandbox;
 * `restarted-unreadable`: the journal could not be read (the store failed), so the episode started over.
 */
export const ResumeRecord = z.object({
  outcome: z.enum(['resumed', 'restarted-diverged', 'restarted-unreadable']),
  /** Turns the journal held for this rollout (its longest chain). */
  turns_journaled: z.number().int().nonnegative(),
  /** Turns kept from the journal: not sampled again. 0 when the episode started over. */
  turns_replayed: z.number().int().nonnegative(),
  /** The turn (0-based) whose replayed tool output differed. */
  diverged_at_turn: z.number().int().nonnegative().optional(),
  error: z.string().optional(),
});
export type ResumeRecord = z.infer<typeof ResumeRecord>;

/**
 * Where a rollout ran (docs/operations.md#lineage), computed on the rollout worker and cached
 * per image name and per environment: the sandbox image's id (`docker image inspect` Id,
 * `sha256:...`) and repo digests, and the environment's version and a sha256 over its sources
 * (src/rollouts/provenance.ts). Absent in records made before 0.7.
 */
export const RolloutProvenance = z.object({
  image: z.object({ name: z.string(), id: z.string(), repo_digests: z.array(z.string()).default([]) }).optional(),
  env: z.object({ id: z.string(), version: z.string(), sha256: z.string() }).optional(),
});
export type RolloutProvenance = z.infer<typeof RolloutProvenance>;

export const Trajectory = z.object({
  format: z.literal('ratchet.trajectory/v1'),
  run_id: z.string(),
  /** The training step, or EVAL_STEP for an EvalSweep episode. */
  step: z.number().int().min(EVAL_STEP),
  env_id: z.string(),
  task_id: z.string(),
  /** Rollouts of one task in one step share a group: advantages are relative within it. */
  group_id: z.string(),
  rollout_index: z.number().int().nonnegative(),
  model: z.string(),
  tools: z.array(ToolSpec),
  /** The whole conversation, system prompt first; each turn's prompt is a prefix of it. */
  messages: z.array(ChatMessage),
  turns: z.array(Turn),
  stop_reason: StopReason,
  error: z.string().optional(),
  /** Absent in trajectories recorded before it existed. */
  sampling: SamplingRecord.optional(),
  /** The environment's final answer (files for localization, a diff for repair...). */
  final: z.record(z.unknown()).default({}),
  reward: z.object({ total: z.number(), components: z.record(z.number()) }).optional(),
  stats: z.object({
    prompt_tokens: z.number().int().nonnegative(),
    completion_tokens: z.number().int().nonnegative(),
    tool_calls: z.number().int().nonnegative(),
    tool_errors: z.number().int().nonnegative(),
    /** The first word of each shell command the agent ran, for the report's usage chart. */
    commands: z.array(z.string()),
    tools_used: z.record(z.number().int().nonnegative()),
  }),
  timing: z.object({
    model_ms: z.number().nonnegative(),
    tools_ms: z.number().nonnegative(),
    sandbox_ms: z.number().nonnegative(),
    total_ms: z.number().nonnegative(),
  }),
  /**
   * Set when an earlier attempt of this rollout had journaled turns (ResumeRecord; the journal itself: ./journal.ts):
   * how many were kept token for token, or why the episode started over. Absent: a first attempt.
   */
  resume: ResumeRecord.optional(),
  /** The sandbox image and environment the rollout ran with (absent before 0.7). */
  provenance: RolloutProvenance.optional(),
});
export type Trajectory = z.infer<typeof Trajectory>;

/** What crosses Temporal for a rollout: a reference and a summary, never the trajectory. */
/** What a rollout's sandboxes cost (src/rollouts/cost.ts): containers acquired, Docker's container-seconds and their cgroups' CPU-seconds. */
export const SandboxCost = z.object({
  containers: z.number().int().nonnegative(),
  container_s: z.number().nonnegative(),
  cpu_s: z.number().nonnegative(),
});
export type SandboxCost = z.infer<typeof SandboxCost>;

export const RolloutSummary = z.object({
  task_id: z.string(),
  group_id: z.string(),
  rollout_index: z.number().int().nonnegative(),
  trajectory: z.object({ uri: z.string(), sha256: z.string(), bytes: z.number() }),
  reward: z.number(),
  components: z.record(z.number()),
  stop_reason: StopReason,
  policy_version: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
  tool_calls: z.number().int().nonnegative(),
  model_ms: z.number().nonnegative(),
  tools_ms: z.number().nonnegative(),
  sandbox_ms: z.number().nonnegative(),
  /** Small usage counts for the step record and the report (absent in records made before they existed). */
  prompt_tokens: z.number().int().nonnegative().optional(),
  tools_used: z.record(z.number().int().nonnegative()).optional(),
  /** Shell commands the agent ran, by program name (first word). */
  commands: z.record(z.number().int().nonnegative()).optional(),
  /** The sandbox image and environment the rollout ran with, for the step's lineage (absent before 0.7). */
  provenance: RolloutProvenance.optional(),
  /** The rollout's sandboxes (absent in records made before the cost ledger). */
  sandbox: SandboxCost.optional(),
});
export type RolloutSummary = z.infer<typeof RolloutSummary>;
