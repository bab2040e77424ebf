/**
 * The SftRun's activities (src/activities/sft.ts): its data frozen into the run's store
 * when the run opens, and one step's batch built from it.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { BuildBatchOutput } from './batch';

export interface PrepareSftDataInput {
  runId: string;
  /** JSONL files of ratchet.trajectory/v1 objects ([sft] data). */
  data: string[];
  /** Rejection sampling: completed trajectories at or above this reward; absent: all. */
  minReward?: number;
  modelPath: string;
  artifacts?: StoreSettings;
}

export interface PrepareSftDataResult {
  /** runs/<run>/sft/data.jsonl: one {"where": "file:line", "trajectory": {...}} a line. */
  data: ArtifactRef;
  trajectories: number;
  /** Trajectories left out by min_reward. */
  rejected: number;
}

export interface BuildSftBatchInput {
  runId: string;
  step: number;
  seed: number;
  batchSize: number;
  data: ArtifactRef;
  modelPath: string;
  seqLen: number;
  artifacts?: StoreSettings;
}

export interface SftActivities {
  /** Checks every trajectory against the model's template; the first call writes them, later ones return the frozen copy. */
  prepareSftData(input: PrepareSftDataInput): Promise<PrepareSftDataResult>;
  /** Step `step`'s batch (seeded from seed and step) at the step's batch keys; errors name the file and line. */
  buildSftBatch(input: BuildSftBatchInput): Promise<BuildBatchOutput>;
}
