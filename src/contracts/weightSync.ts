/**
 * The weight-sync activities' contract (src/activities/weightSync.ts; on an inference host's
 * own queue too). A file of its own so the outage contracts (./outage.ts) can name its input
 * without importing ./activities.ts, which imports them back.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { ActivityLivenessInput } from '../shared/liveness';

export interface SyncWeightsInput {
  runId: string;
  baseUrls: string[];
  /** The version to serve; 0 is the base model (nothing to load, but replicas must answer). */
  policyVersion: number;
  adapter?: ArtifactRef;
  /**
   * trainer.mode = "full": every replica reloads its weights in place from the checkpoint's model/ directory
   * (the base model's at version 0) instead of loading an adapter. Absent: LoRA.
   */
  full?: boolean;
  /** With `full`: the checkpoint of policyVersion (its model/ is what is served); absent at version 0. */
  checkpoint?: ArtifactRef;
  /** Versions below this are unloaded (newest − async_level − 1, so in-flight rollouts keep theirs). */
  keepFromVersion: number;
  /** Heartbeat period and stall window (the run config's [liveness]); absent in older histories. */
  liveness?: ActivityLivenessInput;
  /** The run's [artifacts] store: an s3:// adapter is fetched into this host's cache before vLLM loads it. */
  artifacts?: StoreSettings;
  /**
   * Replicas (of baseUrls) that must serve the version for the sync to succeed; the rest may be
   * down and are returned as `behind`. Absent (older histories, an inference host's own worker): all.
   */
  quorum?: number;
}

export interface SyncWeightsResult {
  policyVersion: number;
  loaded: string[];
  alreadyLoaded: string[];
  unloaded: string[];
  /** Wall time from the call to every replica (or a quorum) serving the version. */
  ms: number;
  /**
   * Replicas (base URLs, or inference hosts' task queues) that were down and missed this version,
   * with the reason; they get no rollouts until a later sync loads it (src/agent/replicaPool.ts).
   * Absent when every replica serves it.
   */
  behind?: string[];
}

export interface WeightSyncActivities {
  /** The run ended: its adapters leave every replica (other runs' are never touched). */
  unloadRunAdapters(input: { runId: string; baseUrls: string[] }): Promise<{ unloaded: string[]; down: string[] }>;
  syncWeights(input: SyncWeightsInput): Promise<SyncWeightsResult>;
}
