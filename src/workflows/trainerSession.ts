/**
 * The run's trainer: a stateful Python worker on its own task queue, leased to
 * this run through `trainer.announce` and loaded with the run's last checkpoint.
 * When it dies (a timeout on its queue) or its lease was taken (the run left it
 * idle past the lease), it is re-announced and reloaded, so a step is applied
 * exactly once. Workflow code.
 */
import { ActivityFailure, ApplicationFailure, TimeoutFailure, deprecatePatch, log, patched, type ActivityOptions } from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { InitResolved, RunConfig } from '../config/schema';
import { forActivity, type LivenessWindows } from '../shared/liveness';
import { trainingPriority } from '../shared/fairness';
import type { TrainerTimeouts } from '../contracts/run';
import type { TrainerActivities, TrainerStepMetrics } from '../contracts/trainer';
import { DEPRECATED_PATCHES, PATCHES } from './patches';
import { announcer, light, trainerIoOn, trainerIoOptions, trainerOptions } from './proxies';
import type { RunControl } from './runControl';
import { besideOthers, patientActivities } from './storeWait';
import { toTrainerConfig } from './trainerConfig';

export interface SavedStep {
  checkpoint: ArtifactRef;
  /** null: trainer.mode = "full" (the weights are the checkpoint's model/). */
  adapter: ArtifactRef | null;
  policy_version: number;
  /** The trainer's code version (from 0.7 trainers; older ones do not report it). */
  code?: { version: string; sha256: string; torch?: string; threads?: number };
}

export interface TrainedStep {
  metrics: TrainerStepMetrics;
  saved: SavedStep;
  restarts: number;
}

/** A fault deterministic for this step's batch: nothing was applied, the run records it and goes on. */
export interface StepFault {
  fault: { type: string; message: string };
  restarts: number;
}

/** How many times one step may lose its trainer before the run gives up. */
const MAX_TRAINER_RESTARTS = 20;

/** trainer.step's typed errors that the same batch would raise on any trainer (docs/contracts.md). */
const STEP_FAULTS = ['NonFiniteGradient', 'StepOutOfMemory', 'StepPartition'];

const isStepFaultType = (type: string | undefined): type is string => {
  if (!type || !STEP_FAULTS.includes(type)) return false;
  deprecatePatch(DEPRECATED_PATCHES.stepFaultsSkipped);
  if (type === 'StepPartition') deprecatePatch(DEPRECATED_PATCHES.stepPartitionSkipped);
  return true;
};

/**
 * Histories from before PATCHES.trainerLossNotPoison: a step whose trainer.step lost its trainer this many
 * times was recorded as a `TrainerKilled` step fault and skipped. A lost process (a timeout) cannot tell a
 * batch that kills its trainer from a partition or a reboot, so it no longer counts; a batch is poison only
 * when it fails with the same error class on two trainer processes (PoisonBatch, processFaultOf).
 */
export const MAX_TRAINER_KILLS_PER_STEP = 2;

/**
 * trainer.step started on a trainer (it heartbeated at least once: the liveness thread beats at
 * once) and the trainer then went silent. A trainer already gone before the step started has no
 * heartbeat details: that is not the batch's doing.
 */
const diedMidStep = (err: unknown): boolean =>
  err instanceof ActivityFailure && err.cause instanceof TimeoutFailure && err.cause.lastHeartbeatDetails !== undefined;

const appFailureType = (err: unknown): string | undefined =>
  err instanceof ActivityFailure && err.cause instanceof ApplicationFailure ? err.cause.type ?? undefined : undefined;

/**
 * A process fault (TrainerFault): trainer.load/step/save raised an error the trainer has no type for (a CUDA or
 * NCCL runtime error, an out-of-memory at load, a bug) and the process fenced itself. The error's class and the
 * process are in the failure's details; the process's queue stands in for a trainer that did not name itself.
 */
const processFaultOf = (err: unknown, queue: string | undefined): { errorClass: string; worker: string } | undefined => {
  if (appFailureType(err) !== 'TrainerFault' || !patched(PATCHES.trainerProcessFault)) return undefined;
  const details = ((err as ActivityFailure).cause as ApplicationFailure).details?.[0] as { error_class?: unknown; worker_id?: unknown } | undefined;
  return {
    errorClass: typeof details?.error_class === 'string' ? details.error_class : 'unknown',
    worker: typeof details?.worker_id === 'string' ? details.worker_id : queue ?? 'unknown',
  };
};

/** The trainer process is gone (its queue timed out). */
export const isTrainerGone = (err: unknown): boolean =>
  err instanceof ActivityFailure && (err.cause instanceof TimeoutFailure);

/** The trainer lives but no longer holds this run: its lease lapsed and another run took it. */
const isLeaseLost = (err: unknown): boolean => {
  const t = appFailureType(err);
  if (t !== 'TrainerNotLoaded' && t !== 'TrainerBusy') return false;
  deprecatePatch(DEPRECATED_PATCHES.trainerLease);
  return true;
};

/** trainer.load's errors for a checkpoint that may be corrupt (docs/errors.md): the run checks it and may fall back. */
const CHECKPOINT_LOAD_ERRORS = ['ArtifactError', 'CheckpointError'];

/**
 * The trainer could not load the run's newest checkpoint, and it may be corrupt: TrainRun verifies it and
 * falls back to the newest one that verifies (PATCHES.checkpointFallback). Not a Temporal failure: it never
 * leaves the workflow; `failure` is what the run fails with when the checkpoint turns out sound.
 */
export class CheckpointLoadFailed extends Error {
  constructor(readonly checkpoint: ArtifactRef, readonly failure: unknown, readonly detail: string) {
    super(`the trainer could not load checkpoint ${checkpoint.uri}: ${detail}`);
    this.name = 'CheckpointLoadFailed';
  }
}

export class TrainerSession {
  private queue: string | undefined;
  /** A load begun by `loadAhead` and not yet awaited: the next `ensure` takes its outcome. */
  private loadingAhead: Promise<string> | undefined;
  /** A trainer this run held before continue-as-new: tried before announcing. */
  private carried: string | undefined;

  constructor(
    private readonly run: RunControl,
    private readonly config: RunConfig,
    private readonly timeouts: TrainerTimeouts | undefined,
    private readonly windows: LivenessWindows,
    carriedQueue?: string,
    /** The run's [artifacts] store: the trainer reads s3:// refs and writes checkpoints there. */
    private readonly store?: StoreSettings,
    /** [model] init_from, resolved (PATCHES.initFrom): the adapter a load without a checkpoint starts from. */
    private readonly init?: InitResolved,
  ) {
    this.carried = carriedQueue;
  }

  /** A trainer call's options with the run's priority and fairness keys (src/shared/fairness.ts). */
  private keyed(options: ActivityOptions): ActivityOptions {
    return { ...options, priority: trainingPriority(this.run.runId, this.config.orchestrator.fairness_weight) };
  }

  /** A trainer holds this run's model (loaded in this execution), or its load is under way. */
  get loadedOrLoading(): boolean {
    return this.queue !== undefined || this.loadingAhead !== undefined;
  }

  /** The queue of the trainer this run holds, if it has one now (carried across continue-as-new). */
  get heldQueue(): string | undefined {
    return this.queue ?? this.carried;
  }

  /**
   * Announces and loads a trainer now, without waiting for it (the step's rollouts run meanwhile); the next
   * `ensure` waits for this load and meets its failure, a CheckpointLoadFailed included, as if it had made it.
   */
  loadAhead(checkpoint: ArtifactRef | undefined): void {
    if (this.queue || this.loadingAhead) return;
    const loading = this.load(checkpoint, false);
    loading.catch(() => { /* met by the ensure that takes it */ });
    this.loadingAhead = loading;
  }

  /** The queue of a trainer that holds this run's model at `checkpoint`; announces and loads one if needed. */
  async ensure(checkpoint: ArtifactRef | undefined): Promise<string> {
    const ahead = this.loadingAhead;
    this.loadingAhead = undefined;
    if (this.queue) return this.queue; // a load ahead that finished set it
    if (!ahead) return this.load(checkpoint, true);
    this.run.waitingForTrainer = true;
    this.run.publish();
    try {
      return await ahead;
    } finally {
      this.run.waitingForTrainer = false;
      this.run.publish();
    }
  }

  /** Announce (or take the carried trainer) and load; `waiting`: the run waits on it, which its status shows. */
  private async load(checkpoint: ArtifactRef | undefined, waiting: boolean): Promise<string> {
    const run = this.run;
    if (waiting) {
      run.waitingForTrainer = true;
      run.publish();
    }
    let task_queue: string | undefined;
    let worker_id: string | undefined;
    if (this.carried) {
      deprecatePatch(DEPRECATED_PATCHES.trainerKeptAcrossContinueAsNew);
      // The trainer this run held before continue-as-new: its lease is still this run's.
      task_queue = this.carried;
      worker_id = this.carried;
    } else {
      let freed: string | undefined;
      ({ task_queue, worker_id, freed_run_id: freed } = await announcer['trainer.announce']({ run_id: run.runId }));
      if (freed && patched(PATCHES.endedRunAdaptersUnloaded)) await this.unloadEnded(freed);
    }
    this.carried = undefined;
    const q = task_queue;
    let loadedState;
    try {
      loadedState = await patientActivities<TrainerActivities>(waiting ? run : besideOthers(run), this.keyed(trainerIoOptions(q, this.timeouts)))['trainer.load']({
        run_id: run.runId, trainer_config: toTrainerConfig(this.config), checkpoint, store: this.store, liveness: forActivity(this.windows, 'trainer'),
        ...(checkpoint === undefined && this.init ? { init: this.init } : {}),
      });
    } catch (err) {
      const type = appFailureType(err);
      if (checkpoint && type && CHECKPOINT_LOAD_ERRORS.includes(type) && patched(PATCHES.checkpointFallback)) {
        // The trainer holds this run's lease: keep it for the load of the checkpoint the run falls back to.
        this.carried = q;
        throw new CheckpointLoadFailed(checkpoint, err, `${type}: ${(err as ActivityFailure).cause!.message}`);
      }
      throw err;
    }
    if (loadedState.policy_version !== run.policyVersion) {
      throw ApplicationFailure.nonRetryable(
        `trainer ${worker_id} loaded policy version ${loadedState.policy_version} from ${checkpoint?.uri ?? (this.init ? `init_from ${this.init.from}` : 'the base model')}, but the run is at version ${run.policyVersion}`,
        'TrainerStateMismatch');
    }
    log.info('trainer ready', { worker_id, task_queue, policyVersion: run.policyVersion });
    this.queue = task_queue;
    if (waiting) {
      run.waitingForTrainer = false;
      run.publish();
    }
    return task_queue;
  }

  /**
   * trainer.step then trainer.save for step `s`, on a live trainer; a trainer that dies meanwhile
   * is replaced, and one that reports a process fault (TrainerFault: it fenced itself) too. A step fault (non-finite
   * gradient, out of memory twice, a batch that failed with the same error on two trainer processes) comes back as a StepFault.
   */
  async trainAndSave(s: number, batch: ArtifactRef, manifest: ArtifactRef, checkpoint: ArtifactRef | undefined, lr?: number): Promise<TrainedStep | StepFault> {
    const runId = this.run.runId;
    let killed = 0;
    // This step's process faults in trainer.step: the same error class on two different processes is a poison batch.
    const faults: { errorClass: string; worker: string }[] = [];
    for (let restarts = 0; ; restarts++) {
      let inStep = false;
      let q: string | undefined;
      try {
        q = await this.ensure(checkpoint);
        this.run.phase = 'training';
        inStep = true;
        const metrics = await patientActivities<TrainerActivities>(this.run, this.keyed(trainerOptions(q, this.timeouts)))['trainer.step']({ run_id: runId, step: s, batch, manifest, store: this.store, liveness: forActivity(this.windows, 'trainer'), ...(lr !== undefined ? { lr } : {}) });
        inStep = false;
        this.run.phase = 'saving';
        const saved = await patientActivities<TrainerActivities>(this.run, this.keyed(trainerIoOptions(q, this.timeouts)))['trainer.save']({ run_id: runId, step: s, store: this.store, liveness: forActivity(this.windows, 'trainer') });
        return { metrics, saved, restarts };
      } catch (err) {
        if (err instanceof CheckpointLoadFailed) throw err;
        const type = appFailureType(err);
        if (isStepFaultType(type)) {
          const message = (err as ActivityFailure).cause!.message;
          log.warn('the trainer could not apply this step; recorded as an error, the run goes on', { step: s, type, message });
          return { fault: { type, message }, restarts };
        }
        const fault = processFaultOf(err, q);
        if (fault && inStep) {
          const earlier = faults.find((f) => f.errorClass === fault.errorClass && f.worker !== fault.worker);
          faults.push(fault);
          if (earlier) {
            const message = `step ${s}: its batch failed trainer.step with ${fault.errorClass} on two trainer processes ` +
              `(${earlier.worker}, ${fault.worker}); nothing applied, the step is skipped as a poison batch. Last: ${(err as ActivityFailure).cause!.message}`;
            log.warn('a poison batch: the same error on two trainers; recorded as an error, the run goes on', { step: s, message });
            this.queue = undefined;
            this.carried = undefined;
            return { fault: { type: 'PoisonBatch', message }, restarts };
          }
        }
        // A lost process (a timeout) is infrastructure, not the batch (trainerLossNotPoison); before, two made TrainerKilled.
        if (inStep && diedMidStep(err) && ++killed >= MAX_TRAINER_KILLS_PER_STEP && !patched(PATCHES.trainerLossNotPoison)) {
          deprecatePatch(DEPRECATED_PATCHES.trainerKilledStepFault);
          const message = `step ${s}: its batch lost the trainer ${killed} times in trainer.step (the process died or ` +
            `hung: segfault, OOM killer, NCCL abort, a stalled step); nothing applied, the step is skipped. Last: ${String(err)}`;
          log.warn('the trainer died twice training this step; recorded as an error, the run goes on', { step: s, message });
          // That trainer is gone: the next step announces one and loads the last checkpoint.
          this.queue = undefined;
          this.carried = undefined;
          return { fault: { type: 'TrainerKilled', message }, restarts };
        }
        if (!(isTrainerGone(err) || isLeaseLost(err) || fault) || restarts >= MAX_TRAINER_RESTARTS) throw err;
        // A new (or re-leased) trainer loads the last checkpoint, so this step is applied exactly once.
        log.warn('trainer is gone; re-announcing and reloading the last checkpoint', { step: s, error: String(err) });
        this.queue = undefined;
        this.carried = undefined;
      }
    }
  }

  /** The trainer came from a run that ended without releasing it (terminated): its adapters leave inference too. */
  private async unloadEnded(ended: string): Promise<void> {
    log.warn('took the trainer from a run that no longer runs; unloading its adapters', { ended_run_id: ended });
    try {
      await light.unloadRunAdapters({ runId: ended, baseUrls: this.config.inference.base_urls });
    } catch (err) {
      log.warn('could not unload the ended run\'s adapters; they only cost inference memory', { ended_run_id: ended, error: String(err) });
    }
  }

  /** The run ended: free the trainer for the next run (an ended run that did not frees it when another announces, or by lease expiry). */
  async release(): Promise<void> {
    // A load begun ahead (a run stopped during its first rollouts) leases the trainer too: wait for it, so it is freed.
    if (this.loadingAhead) await this.loadingAhead.catch(() => undefined);
    this.loadingAhead = undefined;
    const q = this.heldQueue;
    if (!q) return;
    this.queue = undefined;
    this.carried = undefined;
    try {
      await trainerIoOn(q, this.timeouts)['trainer.release']({ run_id: this.run.runId });
    } catch (err) {
      log.warn('could not release the trainer; its lease expires on its own', { task_queue: q, error: String(err) });
    }
  }
}

export const isStepFault = (r: TrainedStep | StepFault): r is StepFault => 'fault' in r;
