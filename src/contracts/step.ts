/**
 * One training step as it crosses workflows and activities: the tasks it samples,
 * the StepRollouts child's input and result, the progress signal the child sends
 * its parent, the step's rollout statistics and the summary TrainRun keeps of it.
 * The step's stored record (metrics.jsonl) is in ./records.ts. Pure: workflow code.
 */
import type { Duration } from '@temporalio/common';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { RunConfig } from '../config/schema';
import type { LivenessWindows } from '../shared/liveness';
import type { OutageWaitLimits } from './outage';

/** One task of a step's batch: a reference into the task set, never the row itself. */
export interface SampledTask {
  envId: string;
  groupId: string;
  datasetPath: string;
  instanceId: string;
  /** Index of the [[env]] section, for its args and rubric. */
  envIndex: number;
}

/** The small numbers a step leaves in the workflow (the full record is in metrics.jsonl). */
export interface StepSummary {
  step: number;
  meanReward: number;
  components: Record<string, number>;
  rollouts: number;
  dropped: number;
  policyVersion: number;
}

/**
 * Statistics over a step's rollout summaries (src/rollouts/stats.ts computes them):
 * the rollout half of the step's record, in camelCase.
 */
export interface RolloutStats {
  meanReward: number;
  rewardStd: number;
  components: Record<string, number>;
  stopReasons: Record<string, number>;
  completionTokens: number;
  toolCalls: number;
  promptTokens: number;
  meanStaleness: number;
  /** Policy-version lag -> rollouts. */
  stalenessHistogram: Record<string, number>;
  toolsUsed: Record<string, number>;
  shellCommands: Record<string, number>;
  /** Distinct sandbox image ids and environments of the rollouts (their summaries' provenance), sorted; absent when none reported them. */
  sandboxImageDigests?: string[];
  envModules?: { id: string; version: string; sha256: string }[];
  /** Groups (tasks) among the rollouts, and those whose baseline rewards differ: the only ones with a learning signal. */
  groups?: number;
  informativeGroups?: number;
  /** The step's sandboxes, summed over its rollouts' summaries (absent when none carries figures: older workers). */
  sandbox?: { containers: number; container_s: number; cpu_s: number };
}

/** StepRollouts' input: one step's rollouts, run as a child of TrainRun. */
export interface StepRolloutsInput {
  runId: string;
  step: number;
  policyVersion: number;
  modelName: string;
  /** Served for policyVersion (to reload it into a replica that restarted). */
  adapter?: ArtifactRef;
  /** trainer.mode = "full": a replica that restarted gets policyVersion's checkpoint (the base model at version 0) instead. */
  full?: { checkpoint?: ArtifactRef };
  keepFromVersion: number;
  /** Always empty: the tasks are in `manifest` (they were inline in the removed per-rollout fan-out). */
  tasks: SampledTask[];
  /** The step manifest (src/contracts/manifest.ts): tasks and settings by reference, run in chunks (v0.6-step-chunks). */
  manifest?: ArtifactRef;
  /** Tasks in the manifest. */
  taskCount?: number;
  /** Events a shard's history may reach before it continues as new (tests set it low; default SHARD_EVENTS_BEFORE_CONTINUE). */
  shardEventsBeforeContinue?: number;
  config: Pick<RunConfig, 'sampling' | 'env' | 'sandbox' | 'inference' | 'orchestrator'> & { liveness?: LivenessWindows };
  taskSetDir: string;
  seed: number;
  /** Workflow id to send progress to; absent when run on its own (benchmarks). */
  parentWorkflowId?: string;
  /** The run's [artifacts] store (absent: the workers' default). */
  artifacts?: StoreSettings;
  /** The run's split of long disk waits (TrainRunInput.outageWaits). */
  outageWaits?: OutageWaitLimits;
  /** TrainRunInput.rolloutWorkersWatchS. */
  rolloutWorkersWatchS?: number;
  /** TrainRunInput.rolloutHeartbeat. */
  rolloutHeartbeat?: Duration;
  /** A refill round of difficulty filtering (> 0; absent: the step's first round): its summaries get their own keys. */
  round?: number;
}

/**
 * Rollout summaries per part StepRollouts stores with `storeRolloutSummaries`: ~0.8 KB each,
 * so a part's activity input stays far below Temporal's 2 MB payload limit.
 */
export const SUMMARIES_PER_PART = 1000;

/** StepRollouts' summaries, as one artifact ref. */
/** `events`: the history events of StepRollouts and its shards (the cost ledger's temporal_child_events); absent before it. */
export type StepRolloutsResult = { summaries: ArtifactRef; count: number; events?: number };

/** Sent by a step's rollout child to its parent, by workflow id, as groups finish (signal `rolloutProgress`). */
export interface RolloutProgressSignal {
  step: number;
  done: number;
  total: number;
  waitingForInference?: boolean;
  /** A rollout found its disk full (DiskFull): the parent shows waiting-for-disk. Absent before it existed. */
  waitingForDisk?: boolean;
  /** A rollout or the step's summaries found the store unreachable (StoreUnavailable): the parent shows waiting-for-store. */
  waitingForStore?: boolean;
  /** Rollouts are pending and no rollout worker runs or polls: the parent shows waiting-for-rollout-workers. */
  waitingForRolloutWorkers?: boolean;
  /**
   * With waitingForRolloutWorkers: the rollout hosts that took themselves out of service, and why
   * (boundedHosts); non-empty, the parent shows waiting-for-healthy-rollout-hosts. Absent before 0.8.
   */
  unhealthyRolloutHosts?: UnhealthyRolloutHost[];
}

/** A rollout host out of service until its health probe passes (src/workers/hostHealth.ts). */
export interface UnhealthyRolloutHost {
  host: string;
  error: string;
  /** When it went out of service (ISO 8601). */
  since: string;
}

/** Hosts a status or a signal names at most; the rest are counted by the one after the last. */
export const UNHEALTHY_HOSTS_NAMED = 4;
/** An unhealthy host's error, cut to this many characters wherever it crosses a history. */
export const UNHEALTHY_ERROR_CHARS = 240;

/** The unhealthy hosts as a workflow carries them: bounded in count and in each string, so a signal stays small. */
export function boundedHosts(hosts: readonly UnhealthyRolloutHost[]): UnhealthyRolloutHost[] {
  const cut = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s);
  const named = hosts.slice(0, UNHEALTHY_HOSTS_NAMED).map((h) => ({ host: cut(h.host, 128), error: cut(h.error, UNHEALTHY_ERROR_CHARS), since: cut(h.since, 40) }));
  if (hosts.length > UNHEALTHY_HOSTS_NAMED) named.push({ host: `(${hosts.length - UNHEALTHY_HOSTS_NAMED} more)`, error: 'see `ratchet doctor` on each rollout host', since: named[0]!.since });
  return named;
}
