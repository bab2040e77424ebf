/**
 * The Python trainer's activities as TrainRun calls them (docs/contracts.md, "Trainer
 * activities"). The other side is trainer/ratchet_trainer/worker.py (the activities,
 * registered with explicit names) and core/ (what they do). Payload keys are snake_case
 * on both sides. Pure: workflow code imports it.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { ActivityLivenessInput } from '../shared/liveness';
import type { InitResolved } from '../config/schema';

/** What `trainer.step` answers (worker.py's step result); the step record keeps it under `trainer`. */
export interface TrainerStepMetrics {
  loss: number;
  entropy?: number;
  clip_frac?: number;
  mismatch_kl?: number;
  grad_norm?: number;
  tokens?: number;
  /** The cost ledger (docs/operations.md): this process's CPU-seconds over the step; GPU-seconds (wall × ranks on CUDA, else 0). */
  cpu_s?: number;
  gpu_s?: number;
  applied: boolean;
  [k: string]: unknown;
}

/** Python activities, names as registered by the trainer worker (explicit `name=`). */
export interface TrainerActivities {
  /** Claims the trainer's lease for run_id (TrainerBusy while another run holds it). */
  /** freed_run_id: the trainer was taken from that run, whose workflow no longer runs (it never released it). */
  'trainer.announce'(input: { run_id: string }): Promise<{ task_queue: string; worker_id: string; freed_run_id?: string }>;
  // `store`: the run's [artifacts] settings; the trainer reads s3:// refs and writes checkpoints there (no shared disk).
  // `init` ([model] init_from, sent only without a checkpoint): the adapter the run starts from, loaded as step 0's weights (fresh optimiser and ledger).
  'trainer.load'(input: { run_id: string; trainer_config: Record<string, unknown>; checkpoint?: ArtifactRef; init?: InitResolved; store?: StoreSettings; liveness?: ActivityLivenessInput }): Promise<{ step: number; policy_version: number; ledger: unknown }>;
  // `lr`: a learning rate changed with `ratchet set` (absent: the config's), applied from this step on.
  'trainer.step'(input: { run_id: string; step: number; batch: ArtifactRef; manifest: ArtifactRef; store?: StoreSettings; liveness?: ActivityLivenessInput; lr?: number }): Promise<TrainerStepMetrics>;
  'trainer.save'(input: { run_id: string; step: number; store?: StoreSettings; liveness?: ActivityLivenessInput }): Promise<{ checkpoint: ArtifactRef; adapter: ArtifactRef | null; policy_version: number; code?: { version: string; sha256: string; torch?: string; threads?: number } }>;
  /** The run ended: the trainer drops its model and frees its lease. */
  'trainer.release'(input: { run_id: string }): Promise<{ released: boolean; worker_id: string }>;
}
