import { z } from 'zod';
import { StepRecord, type ControlAction, type EvalSweepStarted, type RunOverrides, type StepLineage } from '../contracts/records';
import type { Cost } from '../shared/cost';

/**
 * What the report reads, and its own view of a step. A run's steps are stored as
 * StepRecord lines (src/contracts/records.ts: one JSON line per finished step in
 * `runs/<run>/metrics.jsonl`, written by TrainRun's metrics activity); the report
 * turns each into a ReportStep, the numbers it plots. The eval result it reads is
 * EvalResult (src/contracts/eval.ts), written by EvalSweep. Pure: workflow code
 * may import the types.
 */

const Count = z.number().nonnegative();
const Histogram = z.record(z.string(), Count);

export const PHASES = ['rollout', 'scoring', 'batch', 'train', 'sync'] as const;
export type PhaseName = (typeof PHASES)[number];

/** One step as the report plots it: derived from a StepRecord (reportStep), never stored by Ratchet itself. */
export interface ReportStep {
  step: number;
  policy_version: number;
  reward: { mean: number; std: number; min: number; max: number };
  /** Mean of each reward component over the step's rollouts, by component name. */
  components: Record<string, number>;
  rollouts: number;
  /** Finished agent episodes (a rollout that errored counts in rollouts, not here). */
  episodes?: number;
  /** Tokens the policy generated plus the prompt tokens it read, over the step. */
  tokens: number;
  /** Wall time of each phase in ms; with async_level >= 1 phases overlap. */
  phase_ms: Record<PhaseName, number>;
  /** Samples by staleness (policy versions behind the trainer): {"0": 12, "1": 4}. */
  staleness: Record<string, number>;
  /** Tool calls by tool name over the step. */
  tool_calls: Record<string, number>;
  /** Shell commands by program name (first word), over the step's bash/shell tool calls. */
  shell_commands: Record<string, number>;
  started_at: string;
  finished_at: string;
  /** The trainer's step metrics, as recorded. */
  trainer?: Record<string, unknown>;
  /** Control actions recorded with this step (who, why), the worker build it ran on, settings changed with `ratchet set`. */
  control?: ControlAction[];
  build?: { deployment: string; build_id: string };
  overrides?: RunOverrides;
  lineage?: StepLineage;
  /** What the step cost (the cost ledger); absent in records from before it. */
  cost?: Cost;
  /** The eval sweep started on this step's checkpoint ([eval] every_steps). */
  eval_sweep?: EvalSweepStarted;
  /** Groups rolled out and the informative ones (rewards not all alike); the policy version that sampled the step; refill rounds. */
  groups?: number;
  informative_groups?: number;
  sampling_policy_version?: number;
  refill_rounds?: number;
}

/**
 * StepRecord's timing_ms keys -> report phases, each counted once: `rollouts_waited`
 * is the step's wall time spent waiting for rollouts (with async_level >= 1 the
 * rest of `rollouts` overlapped the previous step's training), and
 * `weight_sync_activity` is inside `weight_sync`. TrainRun scores inside the rollout
 * activity, so scoring is part of the rollout phase unless a writer times it apart.
 */
const TIMING_PHASES: Record<string, PhaseName> = {
  rollouts_waited: 'rollout',
  scoring: 'scoring',
  build_batch: 'batch',
  train_and_save: 'train',
  weight_sync: 'sync',
};

/**
 * The report's view of a stored step. What the record does not carry (reward min/max,
 * per-tool counts, the step's start) falls back to what can be derived, never invented.
 */
export function reportStep(r: StepRecord): ReportStep {
  const phase_ms: Record<PhaseName, number> = { rollout: 0, scoring: 0, batch: 0, train: 0, sync: 0 };
  for (const [key, phase] of Object.entries(TIMING_PHASES)) {
    const ms = r.timing_ms[key];
    if (ms !== undefined) phase_ms[phase] += ms;
  }
  const wall = r.timing_ms.step ?? r.timing_ms.total ?? Object.values(phase_ms).reduce((a, b) => a + b, 0);
  const byTool = r.tool_calls_by_tool ?? {};
  return {
    step: r.step,
    policy_version: r.policy_version,
    reward: { mean: r.mean_reward, std: r.reward_std, min: r.reward_min ?? r.mean_reward, max: r.reward_max ?? r.mean_reward },
    components: r.reward_components,
    rollouts: r.rollouts,
    episodes: r.episodes ?? r.rollouts,
    tokens: r.completion_tokens + (r.prompt_tokens ?? 0),
    phase_ms,
    staleness: r.staleness_histogram ?? {},
    tool_calls: Object.keys(byTool).length ? byTool : { 'all tools': r.tool_calls },
    shell_commands: r.shell_commands ?? {},
    started_at: r.started_at ?? new Date(Date.parse(r.time) - wall).toISOString(),
    finished_at: r.time,
    trainer: r.trainer,
    ...(r.control?.length ? { control: r.control } : {}),
    ...(r.build ? { build: r.build } : {}),
    ...(r.overrides ? { overrides: r.overrides } : {}),
    ...(r.lineage ? { lineage: r.lineage } : {}),
    ...(r.cost ? { cost: r.cost } : {}),
    ...(r.eval_sweep ? { eval_sweep: r.eval_sweep } : {}),
    ...(r.groups !== undefined ? { groups: r.groups } : {}),
    ...(r.informative_groups !== undefined ? { informative_groups: r.informative_groups } : {}),
    ...(r.sampling_policy_version !== undefined ? { sampling_policy_version: r.sampling_policy_version } : {}),
    ...(r.refill ? { refill_rounds: r.refill.rounds.length - 1 } : {}),
  };
}

/**
 * Lines without `format`: the report's own step shape, which early report data and its
 * synthetic runs wrote before every writer used StepRecord. Read so those files still
 * render; nothing writes it now. The core numbers are required: a report without them
 * would silently mislead.
 */
const LegacyReportStep = z.object({
  step: z.number().int().nonnegative(),
  policy_version: z.number().int().nonnegative(),
  reward: z.object({ mean: z.number(), std: z.number().nonnegative().default(0), min: z.number(), max: z.number() }),
  components: z.record(z.string(), z.number()).default({}),
  rollouts: z.number().int().nonnegative().default(0),
  episodes: z.number().int().nonnegative().optional(),
  tokens: z.number().nonnegative().default(0),
  phase_ms: z.object({
    rollout: Count.default(0),
    scoring: Count.default(0),
    batch: Count.default(0),
    train: Count.default(0),
    sync: Count.default(0),
  }).default({}),
  staleness: Histogram.default({}),
  tool_calls: Histogram.default({}),
  shell_commands: Histogram.default({}),
  started_at: z.string().datetime({ offset: true }),
  finished_at: z.string().datetime({ offset: true }),
  trainer: z.record(z.string(), z.unknown()).optional(),
}).passthrough();

const StoredStep = StepRecord.transform(reportStep);

/** One line of metrics.jsonl as the report reads it: a StepRecord (it has `format`), or an older line of the report's own shape. */
export function parseStepLine(raw: unknown): z.SafeParseReturnType<unknown, ReportStep> {
  const stored = !!raw && typeof raw === 'object' && 'format' in raw;
  return stored ? StoredStep.safeParse(raw) : LegacyReportStep.safeParse(raw);
}
