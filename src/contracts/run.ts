/**
 * TrainRun's contract with whoever starts and watches it (the CLI, benchmarks, soak
 * tests): its input and result, the progress its query answers, and the resume state
 * carried across continue-as-new. Small, JSON-only shapes; anything large travels as
 * an ArtifactRef (claim check). Pure and zod-free: workflow code imports it.
 */
import type { Duration } from '@temporalio/common';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { RunConfig } from '../config/schema';
import type { OutageWaitLimits } from './outage';
import type { Cost, CostKey } from '../shared/cost';
import type { ControlAction, EvalSweepStarted, RunOverrides } from './records';
import type { EvalVersionSummary } from './eval';
import type { StepSummary, UnhealthyRolloutHost } from './step';

/** State carried across continue-as-new and used to resume a run: nothing large. */
export interface ResumeState {
  /** The next step to run (0-based); steps before it are complete. */
  nextStep: number;
  /** Policy version the trainer and inference servers hold (optimizer steps applied). */
  policyVersion: number;
  /** Newest trainer checkpoint; absent before the first save. */
  checkpoint?: ArtifactRef;
  /** Adapter served as `<run>/policy-v<policyVersion>`; absent for version 0 (base model). */
  adapter?: ArtifactRef;
  /** The parsed config as stored at the run's start: the run never re-reads the TOML. */
  configRef: ArtifactRef;
  seed: number;
  /** Last completed step's mean reward, for progress and search attributes. */
  lastMeanReward?: number;
  /** The run's [artifacts] store (absent: the workers' default store), so a resumed run reads its config from it. */
  artifacts?: StoreSettings;
  /** The checkpoint epoch (0 when absent): one more after each checkpoint fallback (RunStateFile.epoch). */
  epoch?: number;
  /** The pass-rate pool after the last completed step ([orchestrator.pass_rate_pool]); absent: none yet. */
  taskPool?: ArtifactRef;
  /** Only across continue-as-new (never in the state file): the run was paused and stays paused. */
  paused?: boolean;
  /** Only across continue-as-new: the queue of the trainer this run holds the lease of, tried before announcing. */
  trainerQueue?: string;
  /** Settings changed with `ratchet set` (carried across continue-as-new and in the state file). */
  overrides?: RunOverrides;
  /** The run's cost so far (the cost ledger): budgets count from it after continue-as-new or a restart. */
  cost?: Cost;
  /**
   * Only across continue-as-new: policy versions that in-run eval sweeps were still evaluating. The next
   * execution keeps them loaded in inference (it cannot see those sweeps end), until it ends itself.
   */
  evalVersions?: number[];
}

/** What every control update may carry: why, and who asks (recorded with the action). */
export interface ControlRequest {
  reason?: string;
  identity?: string;
}

/** `ratchet release <run>` (the ReleaseRun workflow): who asked, why, and where the run's trainer and adapters are. */
export interface ReleaseRunInput extends ControlRequest {
  runId: string;
  /** The trainer queue the run last called (its history); absent: the run never held a trainer. */
  trainerQueue?: string;
  /** The inference replicas that may serve the run's adapters. */
  baseUrls: string[];
}

export interface ReleaseRunResult {
  runId: string;
  /** released: the trainer held the run and let it go; not-held: another run has it already; gone: no trainer polls that queue. */
  trainer: { state: 'released' | 'not-held' | 'gone' | 'none-recorded'; queue?: string; worker_id?: string; error?: string };
  adapters: { unloaded: string[]; down: string[] };
}

/** The `set` update: settings to change at the next step boundary, with the request's reason and identity. */
export interface SettingsChange extends ControlRequest, RunOverrides {}

export interface TrainRunInput {
  /** configs/<env>/<name>.toml, relative to the repository root or absolute. */
  configPath: string;
  /** Defaults to the workflow id. A run id whose step record exists resumes from it. */
  runId?: string;
  /** Carried by continue-as-new; set by a person only to force a resume point. */
  resume?: ResumeState;
  /** Steps per workflow execution before continue-as-new (overrides the config). */
  continueAsNewEvery?: number;
  /** How fast a dead trainer is noticed; defaults suit a CPU trainer. Durations like "30 seconds". */
  trainerTimeouts?: TrainerTimeouts;
  /**
   * Failed weight-sync attempts one execution waits through before it continues as new
   * (default 60, about an hour at the 60 s backoff cap), so an outage of days cannot
   * grow one history toward its limit.
   */
  inferenceWaitsPerExecution?: number;
  /**
   * How a store or disk outage's wait is split: tries in this history before the call is handed
   * to an OutageWait child that continues as new, tries per child execution, the pause cap.
   * Defaults suit production; tests shorten them.
   */
  outageWaits?: OutageWaitLimits;
  /**
   * Seconds without a finished rollout after which StepRollouts asks whether any rollout worker is
   * alive (default 120); none: the run shows waiting-for-rollout-workers. Tests shorten it.
   */
  rolloutWorkersWatchS?: number;
  /**
   * How fast a rollout chunk on a dead or cut-off rollout worker is noticed and retried elsewhere: its
   * heartbeat timeout (default "1 minute"). Tests shorten it, no shorter than three [liveness] heartbeat_every_s.
   */
  rolloutHeartbeat?: Duration;
  /** `ratchet train --init-from <run>[@step]`: over the config's [model] init_from, for a new run (docs/training.md, "Warm start"). */
  initFrom?: string;
  /** Events a rollout shard's history may reach before it continues as new (tests set it low; default SHARD_EVENTS_BEFORE_CONTINUE). */
  shardEventsBeforeContinue?: number;
}

export interface TrainerTimeouts {
  /** A trainer.* task nobody picks up within this is a dead trainer (default "1 minute"). */
  scheduleToStart?: Duration;
  /** trainer.* heartbeat every ~10 s; a dead or hung trainer is noticed after this (default "1 minute"). */
  heartbeat?: Duration;
}

export interface TrainRunResult {
  runId: string;
  stepsCompleted: number;
  policyVersion: number;
  configSha256: string;
  checkpoint?: ArtifactRef;
  lastMeanReward?: number;
  stopped: 'completed' | 'stopped-by-request';
  /** Control actions accepted after the last step record (a pause and stop between steps): no step record holds them. */
  controls?: ControlAction[];
}

/** What `openRun` answers: the run's parsed config and where it is stored. */
export interface LoadedConfig {
  runId: string;
  config: RunConfig;
  /** The parsed config as stored in the artifact store: `runs/<run>/config.json`. */
  configRef: ArtifactRef;
  configSha256: string;
}

export type RunStatus =
  | 'starting'
  | 'running'
  | 'paused'
  | 'stopping'
  | 'waiting-for-inference'
  | 'waiting-for-store'
  | 'waiting-for-disk'
  | 'waiting-for-trainer'
  /** Rollouts are pending but none runs and no rollout worker polls its queue (StepRollouts' watchdog). */
  | 'waiting-for-rollout-workers'
  /** As waiting-for-rollout-workers, but the rollout hosts are there and took themselves out of service (Progress.unhealthyRolloutHosts says why). */
  | 'waiting-for-healthy-rollout-hosts'
  /** The run's cost reached a budget ([budget]): paused until `ratchet set --budget <figure>=<value>` raises it. */
  | 'budget-exhausted'
  | 'completed'
  | 'stopped';

export type Phase =
  | 'init'
  | 'sampling'
  | 'rollouts'
  | 'building-batch'
  | 'training'
  | 'saving'
  | 'weight-sync'
  | 'metrics'
  | 'idle';

/** TrainRun's `progress` query (src/workflows/messages.ts). */
export interface Progress {
  runId: string;
  step: number;
  maxSteps: number;
  phase: Phase;
  status: RunStatus;
  rolloutsDone: number;
  rolloutsTotal: number;
  policyVersion: number;
  lastStep?: StepSummary;
  /** Rollouts of the next step running ahead while this one trains (async_level >= 1). */
  prefetchedStep?: number;
  /** The newest control actions (up to 20), oldest first. */
  controls?: ControlAction[];
  /** Settings changed with `ratchet set` and in effect; `pendingOverrides`: accepted, in effect from the next step. */
  overrides?: RunOverrides;
  pendingOverrides?: RunOverrides;
  /** The run's cost up to its last recorded step (the cost ledger). */
  cost?: Cost;
  /** While status is budget-exhausted: the budget reached, what was spent and the bound. */
  budgetExhausted?: { key: CostKey; spent: number; budget: number };
  /** The newest eval sweep this execution started ([eval] every_steps), with its result once it finished. */
  lastEval?: LastEval;
  /** While status is waiting-for-healthy-rollout-hosts: each host out of service and its error (bounded). */
  unhealthyRolloutHosts?: UnhealthyRolloutHost[];
}

/** An in-run eval sweep as the progress query shows it: what was started, and how it ended (if it has). */
export interface LastEval extends EvalSweepStarted {
  step: number;
  state: 'running' | 'completed' | 'failed';
  /** The evaluated version's summary (absent: skipped, as already evaluated on this task set). */
  result?: EvalVersionSummary;
  error?: string;
}

/** The ResumeState part of a run's state file: only the small fields continue-as-new may carry. */
export function pickResume(s: ResumeState): ResumeState {
  return {
    nextStep: s.nextStep, policyVersion: s.policyVersion, checkpoint: s.checkpoint, adapter: s.adapter,
    configRef: s.configRef, seed: s.seed, lastMeanReward: s.lastMeanReward,
    ...(s.artifacts ? { artifacts: s.artifacts } : {}),
    ...(s.overrides && Object.keys(s.overrides).length ? { overrides: s.overrides } : {}),
    ...(s.epoch ? { epoch: s.epoch } : {}),
    ...(s.cost ? { cost: s.cost } : {}),
    ...(s.taskPool ? { taskPool: s.taskPool } : {}),
  };
}
