import { z } from 'zod';

/**
 * The formats the report reads from the artifact store. The step record is written
 * by TrainRun's metrics activity (one JSON line per finished step in
 * `runs/<run>/metrics.jsonl`); the eval result by EvalSweep
 * (`runs/<run>/evals/<version>/<taskset-hash>.json`). Pure: workflow code may
 * import the types.
 *
 * Optional fields default to empty so a record from an older writer still renders;
 * the core numbers (step, policy version, reward) are required because a report
 * without them would silently mislead.
 */

const Count = z.number().nonnegative();
const Histogram = z.record(z.string(), Count);

export const PHASES = ['rollout', 'scoring', 'batch', 'train', 'sync'] as const;
export type PhaseName = (typeof PHASES)[number];

export const RewardStats = z.object({
  mean: z.number(),
  std: z.number().nonnegative().default(0),
  min: z.number(),
  max: z.number(),
});

export const StepRecord = z.object({
  step: z.number().int().nonnegative(),
  policy_version: z.number().int().nonnegative(),
  reward: RewardStats,
  /** Mean of each reward component over the step's rollouts, by component name. */
  components: z.record(z.string(), z.number()).default({}),
  rollouts: z.number().int().nonnegative().default(0),
  /** Finished agent episodes (a rollout that errored counts in rollouts, not here). */
  episodes: z.number().int().nonnegative().optional(),
  /** Tokens the policy generated plus the prompt tokens it read, over the step. */
  tokens: z.number().nonnegative().default(0),
  /** Wall time of each phase in ms; with async_level >= 1 phases overlap. */
  phase_ms: z.object({
    rollout: Count.default(0),
    scoring: Count.default(0),
    batch: Count.default(0),
    train: Count.default(0),
    sync: Count.default(0),
  }).default({}),
  /** Samples by staleness (policy versions behind the trainer): {"0": 12, "1": 4}. */
  staleness: Histogram.default({}),
  /** Tool calls by tool name over the step. */
  tool_calls: Histogram.default({}),
  /** Shell commands by program name (first word), over the step's bash/shell tool calls. */
  shell_commands: Histogram.default({}),
  started_at: z.string().datetime({ offset: true }),
  finished_at: z.string().datetime({ offset: true }),
}).passthrough();
export type StepRecord = z.infer<typeof StepRecord>;

const Prf = z.object({ precision: z.number(), recall: z.number(), f1: z.number(), episodes: z.number().int() });
export type Prf = z.infer<typeof Prf>;

export const EvalResult = z.object({
  format: z.literal('ratchet.eval/v1'),
  run_id: z.string(),
  policy_version: z.number().int().nonnegative(),
  taskset: z.object({ name: z.string(), path: z.string(), hash: z.string(), tasks: z.number().int() }),
  k: z.number().int().positive(),
  episodes: z.number().int().nonnegative(),
  /** Only where tests decide the outcome; null for a set without tests (e.g. localization only). */
  pass_at: z.record(z.string(), z.number()).nullable(),
  reward: z.object({ mean: z.number(), std: z.number() }),
  components: z.record(z.string(), z.number()),
  localization: z.object({ file: Prf.nullable(), function: Prf.nullable() }),
  per_episode: z.object({ tokens: z.number(), tool_calls: z.number() }),
  per_task: z.array(z.object({
    instance_id: z.string(),
    n: z.number().int(),
    passed: z.number().int().nullable(),
    reward_mean: z.number(),
  })),
  errors: z.number().int().nonnegative().default(0),
  workflow_id: z.string().optional(),
  started_at: z.string(),
  finished_at: z.string(),
  episodes_per_minute: z.number().nonnegative(),
});
export type EvalResult = z.infer<typeof EvalResult>;
