/**
 * What a run writes to its artifact store and reads back: the step record (one JSON
 * line per finished step in `runs/<run>/metrics.jsonl`) and the run-state file
 * (`runs/<run>/state.json`) a resumed run starts from. One zod schema each, for the
 * writer and every reader; the types are inferred from them.
 *
 * Fields a reader can do without default to empty on read, so a record from an older
 * writer still reads; the writer's type (the parsed one) has them all.
 */
import { z } from 'zod';
import { ArtifactRef } from '../artifacts/ref';
import { ArtifactsFields } from '../config/schema';

const Counts = z.record(z.string(), z.number());

/** One line of runs/<run>/metrics.jsonl: written by TrainRun's `recordStep`, read by `ratchet report`, follow, soak and benchmarks. */
export const StepRecord = z.object({
  format: z.literal('ratchet.step/v1'),
  run_id: z.string(),
  step: z.number().int().nonnegative(),
  /** Workflow time at the end of the step (ISO). */
  time: z.string().datetime({ offset: true }),
  policy_version: z.number().int().nonnegative(),
  mean_reward: z.number(),
  reward_std: z.number().default(0),
  /** Lowest and highest reward of the step: optional, TrainRun does not write them yet (the report falls back to the mean). */
  reward_min: z.number().optional(),
  reward_max: z.number().optional(),
  /** Mean of each reward component over the step's scored rollouts. */
  reward_components: Counts.default({}),
  rollouts: z.number().int().nonnegative().default(0),
  /** Finished agent episodes, where a writer counts them apart from rollouts (one that errored counts in rollouts only). */
  episodes: z.number().int().nonnegative().optional(),
  samples: z.number().int().nonnegative().default(0),
  /** Samples the batch builder dropped, by cause. */
  dropped: Counts.default({}),
  stop_reasons: Counts.default({}),
  /** Mean policy version lag of the step's rollouts (trainer version − rollout version). */
  mean_staleness: z.number().default(0),
  completion_tokens: z.number().default(0),
  prompt_tokens: z.number().optional(),
  /** All tool calls of the step's rollouts. */
  tool_calls: z.number().default(0),
  tool_calls_by_tool: Counts.optional(),
  /** Shell commands by program name (first word), over the step's bash/shell tool calls. */
  shell_commands: Counts.optional(),
  /** Policy-version lag of this step's rollouts -> count. */
  staleness_histogram: Counts.optional(),
  /** The trainer's step metrics (TrainerStepMetrics) and `restarts`, or `{ skipped: true }`. */
  trainer: z.record(z.string(), z.unknown()).default({}),
  /** Set when the step trained on nothing (e.g. EmptyBatch: no trainable token), with the cause. */
  error: z.object({ type: z.string(), message: z.string() }).optional(),
  /**
   * Wall time of the step and its phases (workflow clock): step, rollouts, rollouts_waited, build_batch,
   * train_and_save, weight_sync, weight_sync_activity; `scoring` where a writer times it apart (TrainRun
   * scores inside the rollout activity).
   */
  timing_ms: Counts.default({}),
  /** When the step started (ISO): optional, TrainRun does not write it (the report takes time − timing_ms.step). */
  started_at: z.string().datetime({ offset: true }).optional(),
  /** The batch the step trained on (BuildBatchOutput); absent when it trained on nothing. */
  batch: z.object({ batch: ArtifactRef, manifest: ArtifactRef, summary: z.record(z.string(), z.unknown()) }).nullish(),
  checkpoint: ArtifactRef.optional(),
  adapter: ArtifactRef.optional(),
  /** The weight sync's result (SyncWeightsResult). */
  /** The sync of the step's new version; `behind`: replicas (or inference hosts) down at the time, which missed it (inference.sync_quorum). */
  weight_sync: z.object({ ms: z.number(), behind: z.array(z.string()).optional() }).passthrough().optional(),
}).passthrough();
export type StepRecord = z.infer<typeof StepRecord>;

/** The durable record of the last completed step: what a resumed run starts from (ResumeState's stored fields). */
export const RunStateFile = z.object({
  format: z.literal('ratchet.run-state/v1'),
  runId: z.string(),
  configSha256: z.string(),
  completedStep: z.number().int(),
  nextStep: z.number().int().nonnegative(),
  policyVersion: z.number().int().nonnegative(),
  checkpoint: ArtifactRef.optional(),
  adapter: ArtifactRef.optional(),
  configRef: ArtifactRef,
  seed: z.number(),
  lastMeanReward: z.number().optional(),
  artifacts: ArtifactsFields.optional(),
});
export type RunStateFile = z.infer<typeof RunStateFile>;
