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

/**
 * TrainRun's metrics activity writes `format: "ratchet.step/v1"` lines
 * (src/activities/metrics.ts). This maps one onto StepRecord; fields it does not
 * carry yet (reward min/max, per-tool counts, shell commands, staleness
 * histogram, step start time) fall back to what can be derived, never invented.
 */
/**
 * TrainRun's timing_ms keys -> report phases, each counted once: `rollouts_waited`
 * is the step's wall time spent waiting for rollouts (with async_level >= 1 the
 * rest of `rollouts` overlapped the previous step's training), and
 * `weight_sync_activity` is inside `weight_sync`. Scoring runs inside the rollout
 * activity, so it is part of the rollout phase here.
 */
const TRAINRUN_PHASES: Record<string, PhaseName> = {
  rollouts_waited: 'rollout',
  build_batch: 'batch',
  train_and_save: 'train',
  weight_sync: 'sync',
};

export function fromTrainRunRecord(raw: Record<string, unknown>): Record<string, unknown> {
  const num = (v: unknown): number | undefined => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
  const rec = (v: unknown): Record<string, number> => (v && typeof v === 'object' && !Array.isArray(v)
    ? Object.fromEntries(Object.entries(v as Record<string, unknown>).filter(([, x]) => typeof x === 'number')) as Record<string, number> : {});
  const timing = rec(raw.timing_ms);
  const phase_ms: Record<string, number> = {};
  for (const [key, phase] of Object.entries(TRAINRUN_PHASES)) {
    if (timing[key] !== undefined) phase_ms[phase] = (phase_ms[phase] ?? 0) + timing[key];
  }
  const mean = num(raw.mean_reward) ?? 0;
  const finished = typeof raw.finished_at === 'string' ? raw.finished_at : typeof raw.time === 'string' ? raw.time : undefined;
  const wall = num(timing.step) ?? num(timing.total) ?? Object.values(phase_ms).reduce((a, b) => a + b, 0);
  const started = typeof raw.started_at === 'string' ? raw.started_at
    : finished ? new Date(Date.parse(finished) - wall).toISOString() : undefined;
  const toolCalls = typeof raw.tool_calls === 'number' ? { 'all tools': raw.tool_calls } : rec(raw.tool_calls);
  return {
    ...raw,
    reward: { mean, std: num(raw.reward_std) ?? 0, min: num(raw.reward_min) ?? mean, max: num(raw.reward_max) ?? mean },
    components: rec(raw.reward_components),
    episodes: num(raw.episodes) ?? num(raw.rollouts),
    tokens: (num(raw.completion_tokens) ?? 0) + (num(raw.prompt_tokens) ?? 0),
    phase_ms,
    staleness: rec(raw.staleness_histogram),
    tool_calls: Object.keys(rec(raw.tool_calls_by_tool)).length ? rec(raw.tool_calls_by_tool) : toolCalls,
    shell_commands: rec(raw.shell_commands),
    started_at: started,
    finished_at: finished,
  };
}

/** Accepts both this file's StepRecord and TrainRun's ratchet.step/v1 line. */
export const AnyStepRecord = z.preprocess(
  (raw) => (raw && typeof raw === 'object' && (raw as { format?: unknown }).format === 'ratchet.step/v1'
    ? fromTrainRunRecord(raw as Record<string, unknown>) : raw),
  StepRecord,
);

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
