/**
 * What EvalSweep and its activities say to each other: the sweep's input and
 * result, the plan, one policy version's episodes and its summary. Episodes run
 * through the rollout activity (src/contracts/rollout.ts); the full per-version
 * result is the artifact EvalResult below, written by the evalRecord activity
 * (`runs/<run>/evals/<version>/<taskset-hash>.json`) and read back by the report.
 */
import { z } from 'zod';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { RunConfig } from '../config/schema';
import type { RolloutSummary } from './trajectory';
import type { LivenessWindows } from '../shared/liveness';

export interface EvalSweepInput {
  runId: string;
  /** Explicit policy versions; wins over `newest`. */
  versions?: number[];
  /** The newest N policy versions the run has produced (default 1). */
  newest?: number;
  /** A task set name under the task dir (`heldout` → .ratchet/tasks/heldout.jsonl) or a file path. */
  taskset?: string;
  /** Samples per task (pass@k's n). */
  k?: number;
  /** Re-evaluate versions that already have a result for this task set. */
  force?: boolean;
  /** In-flight rollouts at once. */
  maxConcurrent?: number;
  /**
   * The run's [artifacts] store (never a credential): the sweep reads the run and
   * writes its results there. Absent (inputs from before this field): the worker's
   * default store, RATCHET_ARTIFACTS_URL or the local directory.
   */
  artifacts?: StoreSettings;
  /**
   * How each episode is seeded. "run" (the default): from the run's seed, the version, the task's
   * index and the sample. "task-sample": from the task id and the sample index only
   * (src/shared/evalSeed.ts), so sweeps of two runs, or two versions, draw common random numbers
   * and a paired comparison is not spread by the draws (bench:learn's arms).
   */
  seeds?: 'run' | 'task-sample';
}

export interface EvalTaskRef {
  instanceId: string;
  datasetPath: string;
  hasTests: boolean;
}

export interface EvalPlan {
  runId: string;
  taskset: { name: string; path: string; hash: string; tasks: number };
  k: number;
  versions: number[];
  skipped: number[];
  tasks: EvalTaskRef[];
  envId: string;
  taskSetDir: string;
  sampling: RunConfig['sampling'];
  envArgs: RunConfig['env'][number]['args'];
  rubric: RunConfig['env'][number]['rubric'];
  sandbox: RunConfig['sandbox'];
  inferenceBaseUrl: string;
  servedModel: string;
  seed: number;
  /** The run's [liveness] windows; absent in plans recorded before the section existed. */
  liveness?: LivenessWindows;
  /** Each planned version's adapter (every version > 0, and 0 of a run started with [model] init_from), served before its episodes run. */
  adapters: Record<string, ArtifactRef>;
  /** The sweep input's store settings; absent in plans of sweeps started without them. */
  artifacts?: StoreSettings;
  /** The run's inference.sync_task_queues: each inference host's worker pulls and loads the adapter. */
  syncTaskQueues?: string[];
  /** "task-sample": the input's `seeds`; absent (plans from before, and "run") for the run-and-version seeds. */
  seeds?: 'task-sample';
}

export interface EvalEpisode {
  instanceId: string;
  sample: number;
  summary?: RolloutSummary;
  /** The rollout failed after its retries; counted in `errors`, not in the scores (so are infra_error and setup_error). */
  error?: string;
}

export interface RecordEvalInput {
  plan: EvalPlan;
  version: number;
  episodes: EvalEpisode[];
  startedAt: string;
  finishedAt: string;
  workflowId?: string;
}

/** What the workflow keeps in its memo per version: small. */
export interface EvalVersionSummary {
  version: number;
  key: string;
  passAt1: number | null;
  passAtK: number | null;
  meanReward: number;
  fileF1: number | null;
  functionF1: number | null;
  episodes: number;
  errors: number;
}

/** EvalSweep's result. */
export interface EvalSweepResult {
  runId: string;
  taskset: EvalPlan['taskset'];
  k: number;
  evaluated: EvalVersionSummary[];
  skipped: number[];
}

/** The activities EvalSweep calls on the `ratchet` queue (src/activities/eval.ts implements them). */
export interface EvalActivities {
  /** Resolves versions, validates and hashes the task set, skips what is already evaluated. */
  evalPlan(input: EvalSweepInput): Promise<EvalPlan>;
  /** Scores one version's episodes and writes runs/<run>/evals/<version>/<hash>.json. Idempotent. */
  evalRecord(input: RecordEvalInput): Promise<EvalVersionSummary>;
}

/** Precision, recall and F1 of a localization metric, over a version's episodes. */
export const Prf = z.object({ precision: z.number(), recall: z.number(), f1: z.number(), episodes: z.number().int() });
export type Prf = z.infer<typeof Prf>;

/** One policy version's eval result on one task set, as stored and as the report reads it. */
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
