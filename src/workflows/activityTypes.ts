/**
 * The shapes of activities that TrainRun calls but that other modules implement:
 * the rollout worker's `rollout`, the batch builder's `buildBatch` and the Python
 * trainer's `trainer.*` (docs/contracts.md). Declared here so the workflow depends
 * on the contract, not on the implementation; src/activities/index.ts checks the
 * TypeScript implementations against these at compile time.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { EnvConfig, OrchestratorConfig, RunConfig, SandboxConfig } from '../config/schema';
import type { RolloutSummary } from '../rollouts/trajectory';
import type { ActivityLivenessInput } from '../shared/liveness';

export interface RolloutInput {
  runId: string;
  step: number;
  groupId: string;
  rolloutIndex: number;
  envId: string;
  task: { datasetPath: string; instanceId: string };
  taskSetDir: string;
  policyVersion: number;
  /** `smollm2-135m` for version 0, else `<run>/policy-v<N>` (src/shared/adapters.ts). */
  modelName: string;
  sampling: RunConfig['sampling'];
  envArgs: EnvConfig['args'];
  rubric: EnvConfig['rubric'];
  sandbox: SandboxConfig;
  inferenceBaseUrl: string;
  seed: number;
  liveness?: ActivityLivenessInput;
  artifacts?: StoreSettings;
}

export interface RolloutActivities {
  rollout(input: RolloutInput): Promise<RolloutSummary>;
}

export interface BuildBatchInput {
  runId: string;
  step: number;
  /** The version the trainer holds when it trains this batch: staleness = it − sample's version. */
  trainerPolicyVersion: number;
  trajectories?: RolloutSummary[];
  /** The step's summaries as one artifact (StepRollouts' result since the summaries-by-ref patch). */
  summaries?: ArtifactRef;
  orchestrator: OrchestratorConfig;
  modelPath: string;
  artifacts?: StoreSettings;
  /** The run's [trainer.loss] kind and normalization, for the manifest's length normalizer. */
  loss?: { kind: 'grpo' | 'gspo'; normalization: 'token' | 'sequence' | 'dr_grpo' };
}

export interface BuildBatchOutput {
  batch: ArtifactRef;
  manifest: ArtifactRef;
  summary: {
    samples: number;
    dropped?: Record<string, number>;
    [k: string]: unknown;
  };
}

export interface BatchActivities {
  buildBatch(input: BuildBatchInput): Promise<BuildBatchOutput>;
}

export interface TrainerStepMetrics {
  loss: number;
  entropy?: number;
  clip_frac?: number;
  mismatch_kl?: number;
  grad_norm?: number;
  tokens?: number;
  applied: boolean;
  [k: string]: unknown;
}

/** Python activities, names as registered by the trainer worker (explicit `name=`). */
export interface TrainerActivities {
  /** Claims the trainer's lease for run_id (TrainerBusy while another run holds it). */
  'trainer.announce'(input: { run_id: string }): Promise<{ task_queue: string; worker_id: string }>;
  // `store`: the run's [artifacts] settings; the trainer reads s3:// refs and writes checkpoints there (no shared disk).
  'trainer.load'(input: { run_id: string; trainer_config: Record<string, unknown>; checkpoint?: ArtifactRef; store?: StoreSettings; liveness?: ActivityLivenessInput }): Promise<{ step: number; policy_version: number; ledger: unknown }>;
  'trainer.step'(input: { run_id: string; step: number; batch: ArtifactRef; manifest: ArtifactRef; store?: StoreSettings; liveness?: ActivityLivenessInput }): Promise<TrainerStepMetrics>;
  'trainer.save'(input: { run_id: string; step: number; store?: StoreSettings; liveness?: ActivityLivenessInput }): Promise<{ checkpoint: ArtifactRef; adapter: ArtifactRef; policy_version: number }>;
  /** The run ended: the trainer drops its model and frees its lease. */
  'trainer.release'(input: { run_id: string }): Promise<{ released: boolean; worker_id: string }>;
}
