/**
 * The activities workflows call, as interfaces: what each takes and answers. The
 * implementations (src/activities, the rollout worker, the Python trainer) are checked
 * against these at compile time; workflows proxy them (`proxyActivities<MainActivities>`)
 * and never import an implementation. Names and payload shapes are recorded in every
 * history: change one only with a patch (src/workflows/patches.ts).
 */
import { z } from 'zod';
import { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import { ArtifactsFields, type RunConfig } from '../config/schema';
import { RolloutSummary } from './trajectory';
import type { EvalActivities } from './eval';
import type { FallbackRecord, StepRecord, RunStateFile, TaskFileDigest } from './records';
import type { RolloutInput } from './rollout';
import type { LoadedConfig, ResumeState } from './run';
import type { RolloutStats, SampledTask, StepSummary } from './step';
import type { WeightSyncActivities } from './weightSync';
import type { SftActivities } from './sft';

// ---- Config (src/activities/config.ts) ----

export interface ConfigActivities {
  /** Opens a run: a new one stores its validated config, a run with a completed step resumes from its state file. */
  /** `initFrom`: `ratchet train --init-from`, over the config's [model] init_from (a new run only). */
  openRun(input: { configPath: string; runId: string; initFrom?: string }): Promise<{ loaded: LoadedConfig; resume?: ResumeState }>;
  /** After continue-as-new: the stored config, verified against its recorded hash. */
  readConfig(ref: ArtifactRef, artifacts?: StoreSettings): Promise<RunConfig>;
}

// ---- Task sampling (src/activities/dataset.ts) ----

export interface SampleTasksInput {
  runId: string;
  step: number;
  seed: number;
  batchSize: number;
  taskSetDir: string;
  envs: { id: string; dataset: string; weight: number }[];
  /** A refill round of difficulty filtering (> 0): fresh tasks, group ids of their own (absent: the step's first round). */
  round?: number;
  /**
   * The run's checkpoint epoch (> 0 after a checkpoint fallback): the group ids carry it (`s<step>-e<epoch>-g...`),
   * so a retrained step's trajectories and turn journals have keys of their own and its rollouts are sampled
   * afresh, never resumed from the voided epoch's (issue 39). Absent: epoch 0, the group ids of before.
   */
  epoch?: number;
  /** The run's pass-rate pool ([orchestrator.pass_rate_pool]): tasks drawn by its weights; `poolFloor` its floor. */
  taskPool?: ArtifactRef;
  poolFloor?: number;
  /** Where the pool is (the run's [artifacts] store). */
  artifacts?: StoreSettings;
}

/**
 * The step manifest's settings (./manifest.ts) besides the tasks, which writeStepManifest samples.
 * Sent once per step; each chunk of rollouts then carries only the manifest's reference.
 */
export interface WriteStepManifestInput extends SampleTasksInput {
  policyVersion: number;
  modelName: string;
  rolloutsPerExample: number;
  sampling: RunConfig['sampling'];
  envs: (SampleTasksInput['envs'][number] & { args: RunConfig['env'][number]['args']; rubric: Record<string, number> })[];
  sandbox: RunConfig['sandbox'];
  inferenceBaseUrls: string[];
  liveness: { heartbeat_every_s: number; stall_s: number };
  artifacts?: StoreSettings;
  /** orchestrator.max_concurrent_rollouts, for each chunk's own cap (absent from older workflows). */
  maxConcurrentRollouts?: number;
  /** trainer.mode = "full": the checkpoint's URI the replicas serve for this version (absent at version 0: the base model). */
  fullWeights?: { checkpoint?: string };
}

export interface DatasetActivities {
  /** An empty taskSetDir means the worker's default; the answer names the one used. */
  sampleTasks(input: SampleTasksInput): Promise<SampledTasks>;
  /** Samples the step's tasks as sampleTasks does and writes them with the rollouts' settings as the step manifest; only its ref comes back. */
  writeStepManifest(input: WriteStepManifestInput): Promise<{ taskSetDir: string; manifest: ArtifactRef; tasks: number; files?: TaskFileDigest[] }>;
}

/** The step's tasks, and (from 0.7, for the step's lineage) each env's task file as read: its sha256 and size. */
export interface SampledTasks {
  taskSetDir: string;
  tasks: SampledTask[];
  files?: TaskFileDigest[];
}

// ---- Rollouts (the rollout worker, queue ratchet-rollout: src/activities/rollout.ts) ----

/** The rollout activity's input is one zod schema, RolloutInput in ./rollout.ts: workflows send its input type. */
export interface RolloutActivities {
  rollout(input: RolloutInput): Promise<RolloutSummary>;
}

// ---- A step's rollout summaries as one artifact (src/activities/rolloutSummaries.ts) ----

export const StoreRolloutSummariesInput = z.object({
  runId: z.string().min(1),
  step: z.number().int(),
  /** One part of the summaries (at most SUMMARIES_PER_PART), or the parts to join into the step's one artifact. */
  part: z.number().int().nonnegative().optional(),
  summaries: z.array(RolloutSummary).optional(),
  parts: z.array(ArtifactRef).optional(),
  /** With `parts`: join them into this shard's artifact (runKeys.rolloutSummariesShard), not the step's. */
  shard: z.number().int().nonnegative().optional(),
  /** A refill round of difficulty filtering (> 0): its own keys beside the step's first round. */
  round: z.number().int().nonnegative().optional(),
  artifacts: ArtifactsFields.optional(),
});
export type StoreRolloutSummariesInput = z.input<typeof StoreRolloutSummariesInput>;

export interface RolloutStatsInput {
  summaries: ArtifactRef;
  trainerPolicyVersion: number;
  artifacts?: StoreSettings;
  /** [orchestrator] limit_ended, for the informative-group count (absent: "score"). */
  limitEnded?: 'score' | 'mask';
}

/** Difficulty filtering: the step's rounds of summaries so far, joined, and their informative groups. */
export interface FilterGroupsInput {
  runId: string;
  step: number;
  /** Each round's summaries (StepRollouts' result), round 0 first. */
  rounds: ArtifactRef[];
  limitEnded?: 'score' | 'mask';
  artifacts?: StoreSettings;
}

export interface FilterGroupsResult {
  /** Every round's summaries joined (the step's statistics), and only the informative groups' (its batch). */
  all: ArtifactRef;
  kept: ArtifactRef;
  /** Per round: groups rolled out and informative ones. */
  rounds: { groups: number; informative: number }[];
  informative: number;
}

/** Pass-rate pools: the run's pool after a step's rollouts. */
export interface UpdateTaskPoolInput {
  runId: string;
  step: number;
  /** The pool so far (absent: none yet) and the step's summaries (every round's). */
  previous?: ArtifactRef;
  summaries: ArtifactRef;
  /** A rollout whose reward reaches this passed its task. */
  passReward: number;
  artifacts?: StoreSettings;
}

export interface RolloutSummaryActivities {
  /** Pass-rate pools: counts the step's rollouts into the run's pool, written anew (src/samples/taskPool.ts). */
  updateTaskPool(input: UpdateTaskPoolInput): Promise<{ pool: ArtifactRef; tasks: number; sometimes: number }>;
  storeRolloutSummaries(input: StoreRolloutSummariesInput): Promise<ArtifactRef>;
  /** Difficulty filtering: joins a step's rounds of summaries and keeps the informative groups (src/activities/rolloutSummaries.ts). */
  filterGroups(input: FilterGroupsInput): Promise<FilterGroupsResult>;
  /** The step's statistics for its record, computed beside the data instead of in the workflow. */
  rolloutStatsOf(input: RolloutStatsInput): Promise<RolloutStats & { rollouts: number }>;
}

// ---- Batch building (src/activities/buildBatch.ts) ----

const BuilderOrchestratorConfig = z.object({
  seq_len: z.number().int().positive(),
  mask_truncated_completions: z.boolean(),
  async_level: z.number().int().min(0),
  advantage: z.object({
    kind: z.enum(['grpo', 'dr_grpo', 'rloo']),
    std_normalize: z.boolean(),
    drop_uniform_groups: z.boolean(),
  }),
  non_prefix_policy: z.enum(['split', 'fail']),
  allow_retokenize: z.boolean(),
  /** Absent in workflows from before it: "score", as then. */
  limit_ended: z.enum(['score', 'mask']).default('score'),
});

export const BuildBatchInput = z.object({
  runId: z.string().min(1),
  step: z.number().int().nonnegative(),
  /** The version the trainer holds when it trains this batch: staleness = it − sample's version. */
  trainerPolicyVersion: z.number().int().nonnegative(),
  /** Rollout summaries (their reward is the scored one), or bare trajectory references. */
  trajectories: z.array(z.union([RolloutSummary, ArtifactRef])).default([]),
  /** The step's summaries as one artifact (StepRollouts' result since the summaries-by-ref patch): read here, never inline in a payload. */
  summaries: ArtifactRef.optional(),
  /** The run's [orchestrator] section; only the builder's keys are read. */
  orchestrator: BuilderOrchestratorConfig.passthrough(),
  modelPath: z.string().min(1),
  /** The run's [artifacts] store; absent: the worker's default store. */
  artifacts: ArtifactsFields.optional(),
  /** The run's [trainer.loss] kind and normalization: the manifest records the length normalizer they make. */
  loss: z.object({ kind: z.enum(['grpo', 'gspo', 'sft']), normalization: z.enum(['token', 'sequence', 'dr_grpo']) }).optional(),
});
export type BuildBatchInput = z.input<typeof BuildBatchInput>;

import type { BuildBatchOutput } from './batch';
export type { BuildBatchOutput };

export interface BatchActivities {
  buildBatch(input: BuildBatchInput): Promise<BuildBatchOutput>;
}

// ---- Weight sync: ./weightSync.ts (its own file: the outage contracts name its input too) ----
export type { SyncWeightsInput, SyncWeightsResult, WeightSyncActivities } from './weightSync';

// ---- A finished step (src/activities/metrics.ts) ----

export interface RecordStepInput {
  record: StepRecord;
  state: RunStateFile;
}

export interface MetricsActivities {
  /** Appends the step's record, then the run's new state (src/records/runRecords.ts). */
  recordStep(input: RecordStepInput): Promise<StepSummary>;
}

// ---- A corrupt newest checkpoint (src/activities/checkpointFallback.ts) ----

export interface CheckpointFallbackInput {
  /** The run's state as the workflow holds it: the checkpoint the trainer could not load, the config, the epoch. */
  state: RunStateFile;
  /** The trainer's error (ArtifactError / CheckpointError). */
  error: string;
  /** Workflow time (ISO), so a retried call writes the same record. */
  time: string;
}

export type CheckpointFallbackResult = { fellBack: false } | { fellBack: true; record: FallbackRecord; state: RunStateFile };

export interface CheckpointFallbackActivities {
  /** Verifies the checkpoint the trainer refused; if it is corrupt, records a fallback to the newest one that verifies. */
  fallBackToVerifiedCheckpoint(input: CheckpointFallbackInput): Promise<CheckpointFallbackResult>;
}

// ---- Are rollout workers alive? (src/activities/rolloutWorkers.ts) ----

export interface RolloutWorkersInput {
  /** The StepRollouts execution whose pending rollouts are looked at. */
  workflowId: string;
  runId: string;
  /** The rollout task queue (ratchet-rollout). */
  taskQueue: string;
  /** A poller last seen longer ago than this is gone (default 120 s: a long poll lasts ~70 s). */
  pollerFreshS?: number;
}

import type { UnhealthyRolloutHost } from './step';

export interface RolloutWorkersSeen {
  /** Pending rollouts of the workflow that a worker runs now (started, heartbeating). */
  running: number;
  /** Pending rollouts that wait in the queue for a worker. */
  queued: number;
  /** Workers that polled the rollout queue within pollerFreshS. */
  pollers: number;
  /**
   * Rollout hosts that took themselves out of service (a sandbox that cannot start, a task file that
   * cannot be read) and say so in the store: at most UNHEALTHY_HOSTS_NAMED, each error cut to
   * UNHEALTHY_ERROR_CHARS (src/contracts/step.ts). Absent before 0.8.
   */
  unhealthy?: UnhealthyRolloutHost[];
}

export interface RolloutWorkersActivities {
  /** Whether any rollout worker is alive, from Temporal's own view (describe the workflow and the task queue). */
  rolloutWorkersSeen(input: RolloutWorkersInput): Promise<RolloutWorkersSeen>;
}

/** The main worker's activities (task queue `ratchet`): src/activities/index.ts implements them. */
export interface MainActivities extends ConfigActivities, DatasetActivities, BatchActivities, RolloutSummaryActivities,
  WeightSyncActivities, MetricsActivities, EvalActivities, RolloutWorkersActivities, SftActivities,
  CheckpointFallbackActivities {}
