/**
 * A rollout's turn journal, as the rollout worker writes it while the episode
 * runs and reads it back when a retry of the same rollout starts: one small
 * object per turn (src/rollouts/journal.ts), under runKeys.rolloutJournalTurn.
 * Each part names the attempt that sampled it and the attempt whose part it
 * follows, so parts of a stale attempt (a host cut off from Temporal but not
 * from the store) and of its retry form separate chains and never overwrite
 * each other.
 */
import { z } from 'zod';
import { ChatMessage, ToolCall, Turn } from './trajectory';

/** The sampled assistant turn, exactly as the policy returned it: what a resumed episode uses instead of asking again. */
export const JournalCompletion = z.object({
  content: z.string().nullable(),
  tool_calls: z.array(ToolCall),
  finish_reason: Turn.shape.finish_reason,
  prompt_token_ids: Turn.shape.prompt_token_ids,
  completion_token_ids: Turn.shape.completion_token_ids,
  completion_logprobs: Turn.shape.completion_logprobs,
  completion_logprob_tokens: Turn.shape.completion_logprob_tokens,
  prompt_tokens: z.number().int().nonnegative(),
  completion_tokens: z.number().int().nonnegative(),
});
export type JournalCompletion = z.infer<typeof JournalCompletion>;

/** One turn of a journal. */
export const JournalTurn = z.object({
  format: z.literal('ratchet.journal-turn/v1'),
  /** 0-based turn index in the episode. */
  turn: z.number().int().nonnegative(),
  /** The episode attempt that sampled (or replayed-then-continued to) this turn: a random id per attempt. */
  attempt: z.string().min(1),
  /** The attempt whose part at turn - 1 this one follows; null at turn 0. */
  prev_attempt: z.string().min(1).nullable(),
  policy_version: z.number().int().nonnegative(),
  completion: JournalCompletion,
  /** The tool messages this turn added, in order: what a replay must reproduce. */
  tool_outputs: z.array(ChatMessage),
  model_ms: z.number().nonnegative(),
  tools_ms: z.number().nonnegative(),
  /** When it was written (epoch ms): breaks ties between chains of equal length. */
  at: z.number().nonnegative(),
});
export type JournalTurn = z.infer<typeof JournalTurn>;

/** Written when a replay of a journaled turn gave another tool output: no later attempt replays that part again. */
export const JournalDiverged = z.object({
  format: z.literal('ratchet.journal-diverged/v1'),
  /** The attempt that saw the divergence. */
  attempt: z.string().min(1),
  turn: z.number().int().nonnegative(),
  /** The attempt of the part at `turn` whose replay diverged. */
  part_attempt: z.string().min(1),
  /** The first differing tool output, both sides cut to a few hundred characters (for the record, never compared). */
  expected: z.string(),
  actual: z.string(),
});
export type JournalDiverged = z.infer<typeof JournalDiverged>;
