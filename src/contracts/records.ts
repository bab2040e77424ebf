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
import { COST_KEYS, type CostKey } from '../shared/cost';
import { EVAL_EVERY_STEPS_MAX } from '../config/evalBounds';

const Counts = z.record(z.string(), z.number());

/**
 * The cost ledger's figures (docs/operations.md, "What a run costs and budgets"): per step in the step
 * record's `cost`, summed over the run in the run-state file. Every key is a number that only grows;
 * a budget `max_<key>` bounds the run's sum.
 */

export const CostFigures = z.object(Object.fromEntries(COST_KEYS.map((k) => [k, z.number().nonnegative().default(0)])) as Record<CostKey, z.ZodDefault<z.ZodNumber>>);
export type CostFigures = z.infer<typeof CostFigures>;
/** Budgets by cost key (`max_<key>` in [budget]); unset keys have no bound. */
export const CostBudgets = z.object(Object.fromEntries(COST_KEYS.map((k) => [k, z.number().nonnegative().optional()])) as Record<CostKey, z.ZodOptional<z.ZodNumber>>).strict();
export type CostBudgets = z.infer<typeof CostBudgets>;

/** Settings changed on a running run (`ratchet set`), in effect from a step boundary on; unset keys follow the config. */
export const RunOverrides = z.object({
  /** [trainer.optim] lr from this step on (0: the policy stops moving). */
  learning_rate: z.number().min(0).max(1).optional(),
  /** [orchestrator] async_level (the staleness bound) from this step on. */
  async_level: z.number().int().min(0).max(8).optional(),
  /** Budgets raised (or set) with `ratchet set --budget <key>=<value>`, over the config's [budget]. */
  budget: CostBudgets.optional(),
  /** [eval] every_steps (the in-run eval cadence; 0: off) from this step on. */
  eval_every_steps: z.number().int().min(0).max(EVAL_EVERY_STEPS_MAX).optional(),
});
export type RunOverrides = z.infer<typeof RunOverrides>;

/** One control action on a run (an update the workflow validated and accepted), with who sent it and why. */
export const ControlAction = z.object({
  action: z.enum(['pause', 'resume', 'stop', 'set']),
  /** The caller: `ratchet` sends <user>@<host> ($USER); a client that sends none is recorded as "unknown". */
  identity: z.string(),
  reason: z.string(),
  /** Workflow time at which the run accepted it (ISO). */
  time: z.string(),
  /** The step the run was in (or about to start) when it accepted it. */
  step: z.number().int().nonnegative(),
  /** `set` only: the settings asked for, in effect from the next step boundary. */
  changes: RunOverrides.optional(),
});
export type ControlAction = z.infer<typeof ControlAction>;

/**
 * The EvalSweep a step started on the checkpoint it saved (the in-run eval cadence, [eval] every_steps):
 * its workflow id, and what it evaluates. The sweep runs on, abandoned by the run; its result lands in
 * runs/<run>/evals/<policy_version>/<taskset-hash>.json (src/contracts/eval.ts).
 */
export const EvalSweepStarted = z.object({
  workflow_id: z.string(),
  policy_version: z.number().int().nonnegative(),
  taskset: z.string(),
  k: z.number().int().positive(),
  /** The cadence in effect for the step ([eval] every_steps, or a `ratchet set` of it). */
  every_steps: z.number().int().positive(),
});
export type EvalSweepStarted = z.infer<typeof EvalSweepStarted>;

/**
 * A step's lineage as the workflow records it (src/workflows/lineage.ts): the build, the config, the
 * task rows it sampled, each [[env]] section (rubric weights, args) and the sampling settings, the
 * policy versions its rollouts came from (version -> count), the batch it trained on, the trainer's
 * seed, learning rate and the checkpoints before and after; from 0.7 the task files' sha256 (the
 * sampling activity hashes them) and the trainer's code version (trainer.save reports it). Not yet
 * recorded: the sandbox image's digest, environment module versions.
 */
export const TaskFileDigest = z.object({ env: z.string(), path: z.string(), sha256: z.string(), bytes: z.number().int().nonnegative() });
export type TaskFileDigest = z.infer<typeof TaskFileDigest>;

export const StepLineage = z.object({
  build: z.object({ deployment: z.string(), build_id: z.string() }).optional(),
  config_sha256: z.string(),
  model: z.object({ path: z.string(), served_model: z.string() }),
  tasks: z.object({
    task_set_dir: z.string(),
    seed: z.number(),
    /** Tasks the step sampled; `rows` names the first 256 of them (src/workflows/lineage.ts). */
    row_count: z.number().int().nonnegative().optional(),
    rows: z.array(z.object({ env: z.string(), dataset: z.string(), instance_id: z.string() })),
    /** The step manifest that lists every task row (runs with rollouts in chunks: rows is then empty). */
    step_manifest: ArtifactRef.optional(),
    /** Each env's task file as the step read it (absent before 0.7, and for a task directory). */
    files: z.array(TaskFileDigest).optional(),
  }),
  envs: z.array(z.record(z.string(), z.unknown())),
  sampling: z.record(z.string(), z.unknown()),
  /** The [sandbox] image setting (absent: the stack's default image). */
  sandbox_image: z.string().optional(),
  /** The distinct sandbox image ids (`sha256:...`) the step's rollouts ran in, as their workers inspected them (0.7 on). */
  sandbox_image_digests: z.array(z.string()).optional(),
  /** The distinct environments the step's rollouts ran: version and a sha256 over their sources (0.7 on). */
  env_modules: z.array(z.object({ id: z.string(), version: z.string(), sha256: z.string() })).optional(),
  rollout_policy_versions: Counts,
  batch_sha256: z.string().optional(),
  manifest_sha256: z.string().optional(),
  trainer: z.object({
    seed: z.number(),
    step: z.number().int(),
    learning_rate: z.number(),
    loss: z.string(),
    parent_checkpoint_sha256: z.string().optional(),
    checkpoint_sha256: z.string().optional(),
    adapter_sha256: z.string().optional(),
    /** The trainer's code: its package version and a sha256 over its Python sources (trainer/ratchet_trainer/code_version.py); from 0.7. */
    code: z.object({ version: z.string(), sha256: z.string(), torch: z.string().optional(), threads: z.number().int().positive().optional() }).optional(),
    /** The run started from another run's adapter ([model] init_from): which, by sha256. */
    init_from: z.object({
      from: z.string(), run_id: z.string(), step: z.number().int(), checkpoint_sha256: z.string(), adapter_sha256: z.string(),
    }).optional(),
  }),
});
export type StepLineage = z.infer<typeof StepLineage>;

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
  /**
   * Groups (tasks) the step rolled out, and the informative ones: their baseline rewards differ, so
   * they carry a learning signal (src/samples/groupSignal.ts). Absent in records from before them.
   */
  groups: z.number().int().nonnegative().optional(),
  informative_groups: z.number().int().nonnegative().optional(),
  /** The policy version the step's rollouts were started on (with async_level >= 1, older than the trainer's). */
  sampling_policy_version: z.number().int().nonnegative().optional(),
  /**
   * Online difficulty filtering ([orchestrator] difficulty_filter): the rounds of groups sampled to reach
   * batch_size informative groups, each with the policy version that sampled it; only informative groups
   * were trained on. Absent when the filter is off.
   */
  refill: z.object({
    target: z.number().int().nonnegative(),
    rounds: z.array(z.object({
      round: z.number().int().nonnegative(),
      groups: z.number().int().nonnegative(),
      informative_groups: z.number().int().nonnegative(),
      policy_version: z.number().int().nonnegative(),
    })),
  }).optional(),
  /** The pass-rate pool after this step ([orchestrator.pass_rate_pool]): its tasks seen and those passed sometimes. */
  task_pool: z.object({ pool: ArtifactRef, tasks: z.number().int().nonnegative(), sometimes: z.number().int().nonnegative() }).optional(),
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
  /** The sync of the step's new version; `behind`: replicas (or inference hosts) down at the time, which missed it (inference.sync_quorum). */
  weight_sync: z.object({ ms: z.number(), behind: z.array(z.string()).optional() }).passthrough().optional(),
  /** The worker build (Worker Versioning deployment and build id) the step's workflow code ran on; absent on unversioned workers. */
  build: z.object({ deployment: z.string(), build_id: z.string() }).optional(),
  /** Control actions the run accepted since the previous step record (pause, resume, stop, set). */
  control: z.array(ControlAction).optional(),
  /** Settings changed with `ratchet set` that were in effect for this step. */
  overrides: RunOverrides.optional(),
  /** Where the step came from (`ratchet lineage <run> <step>`). */
  lineage: StepLineage.optional(),
  /** The eval sweep started on this step's checkpoint ([eval] every_steps); absent on the steps between. */
  eval_sweep: EvalSweepStarted.optional(),
  /**
   * The run's checkpoint epoch when the step was recorded: 0 (absent) until a checkpoint fallback, each
   * fallback adds one. A step retrained after a fallback has a record of a higher epoch; readers keep the
   * winner (src/records/winners.ts) and never count a voided record.
   */
  epoch: z.number().int().nonnegative().optional(),
  /** What the step cost (COST_KEYS); absent in records from before the cost ledger. */
  cost: CostFigures.optional(),
  /** The run's cost up to and including this step (its cost plus the previous records'). */
  run_cost: CostFigures.optional(),
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
  /** Settings changed with `ratchet set`, kept by a restarted run. */
  overrides: RunOverrides.optional(),
  /** The checkpoint epoch (see StepRecord.epoch); absent: 0. A state of a higher epoch wins whatever its step. */
  epoch: z.number().int().nonnegative().optional(),
  /** The run's cost so far (the last record's run_cost): a restarted run's budgets count from it. */
  cost: CostFigures.optional(),
  /** The pass-rate pool after the completed step ([orchestrator.pass_rate_pool]): a restarted run samples from it. */
  taskPool: ArtifactRef.optional(),
});
export type RunStateFile = z.infer<typeof RunStateFile>;

/**
 * A checkpoint fallback (runs/<run>/records/fallbacks/): the newest checkpoint did not verify, so the run
 * went back to the newest one that did. Steps after `used_step` are retrained, once each, in epoch `epoch`;
 * their records of earlier epochs are void.
 */
export const FallbackRecord = z.object({
  format: z.literal('ratchet.checkpoint-fallback/v1'),
  run_id: z.string(),
  /** The epoch this fallback starts (the epoch before it + 1). */
  epoch: z.number().int().positive(),
  time: z.string().datetime({ offset: true }),
  /** Who fell back: the trainer load inside TrainRun, or `ratchet restart`. */
  by: z.enum(['trainer-load', 'restart']),
  /** The checkpoint that did not verify, its step, and why. */
  bad: z.object({ checkpoint: ArtifactRef.optional(), adapter: ArtifactRef.optional(), step: z.number().int(), error: z.string() }),
  /** The newest checkpoint that verifies; absent: none did, the run starts again from the base model. */
  used: z.object({ checkpoint: ArtifactRef, adapter: ArtifactRef.optional(), step: z.number().int(), policy_version: z.number().int() }).optional(),
  /** Checkpoints between the two that did not verify either, newest first. */
  skipped: z.array(z.object({ step: z.number().int(), error: z.string() })).default([]),
  /** The steps trained again (each once): used step + 1 .. the bad one. */
  retrained_steps: z.array(z.number().int().nonnegative()),
});
export type FallbackRecord = z.infer<typeof FallbackRecord>;

/**
 * A checkpoint fallback undone (`ratchet fallback revert`; runs/<run>/records/reverts/): the fallback of epoch
 * `reverts` was wrong (committed on an error that was not corruption). It voids every record of that epoch,
 * its own voiding no longer counts, and the run's state is the one it had before that fallback, in
 * `epoch` (above every epoch before it, so it wins). Recorded like a control: who, why, when.
 */
export const FallbackRevertRecord = z.object({
  format: z.literal('ratchet.fallback-revert/v1'),
  run_id: z.string(),
  /** The epoch this revert starts: one above the reverted fallback's. */
  epoch: z.number().int().positive(),
  /** The epoch of the fallback reverted. */
  reverts: z.number().int().positive(),
  time: z.string().datetime({ offset: true }),
  identity: z.string(),
  reason: z.string(),
  /** The state the run has again: the fallback's bad step and checkpoint, which verify. */
  restored: z.object({ step: z.number().int(), checkpoint: ArtifactRef.optional(), adapter: ArtifactRef.optional(), policy_version: z.number().int() }),
});
export type FallbackRevertRecord = z.infer<typeof FallbackRevertRecord>;
