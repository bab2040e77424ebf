/**
 * The run's trainer: a stateful Python worker on its own task queue, found
 * through `trainer.announce` and loaded with the run's last checkpoint. When it
 * dies (a timeout on its queue) it is re-announced and reloaded, so a step is
 * applied exactly once. Workflow code.
 */
import { ActivityFailure, ApplicationFailure, TimeoutFailure, log } from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import type { RunConfig } from '../config/schema';
import type { TrainerStepMetrics } from './activityTypes';
import { announcer, trainerIoOn, trainerOn } from './proxies';
import type { RunControl } from './runControl';
import { toTrainerConfig } from './trainerConfig';
import type { TrainerTimeouts } from './types';

export interface SavedStep {
  checkpoint: ArtifactRef;
  adapter: ArtifactRef;
  policy_version: number;
}

export interface TrainedStep {
  metrics: TrainerStepMetrics;
  saved: SavedStep;
  restarts: number;
}

/** How many times one step may lose its trainer before the run gives up. */
const MAX_TRAINER_RESTARTS = 20;

export const isTrainerGone = (err: unknown): boolean =>
  err instanceof ActivityFailure && (err.cause instanceof TimeoutFailure);

export class TrainerSession {
  private queue: string | undefined;

  constructor(
    private readonly run: RunControl,
    private readonly config: RunConfig,
    private readonly timeouts: TrainerTimeouts | undefined,
  ) {}

  /** The queue of a trainer that holds this run's model at `checkpoint`; announces and loads one if needed. */
  async ensure(checkpoint: ArtifactRef | undefined): Promise<string> {
    if (this.queue) return this.queue;
    const run = this.run;
    run.waitingForTrainer = true;
    run.publish();
    const { task_queue, worker_id } = await announcer['trainer.announce']({});
    const loadedState = await trainerIoOn(task_queue, this.timeouts)['trainer.load']({
      run_id: run.runId, trainer_config: toTrainerConfig(this.config), checkpoint,
    });
    if (loadedState.policy_version !== run.policyVersion) {
      throw ApplicationFailure.nonRetryable(
        `trainer ${worker_id} loaded policy version ${loadedState.policy_version} from ${checkpoint?.uri ?? 'the base model'}, but the run is at version ${run.policyVersion}`,
        'TrainerStateMismatch');
    }
    log.info('trainer ready', { worker_id, task_queue, policyVersion: run.policyVersion });
    this.queue = task_queue;
    run.waitingForTrainer = false;
    run.publish();
    return task_queue;
  }

  /** trainer.step then trainer.save for step `s`, on a live trainer; a trainer that dies meanwhile is replaced. */
  async trainAndSave(s: number, batch: ArtifactRef, manifest: ArtifactRef, checkpoint: ArtifactRef | undefined): Promise<TrainedStep> {
    const runId = this.run.runId;
    for (let restarts = 0; ; restarts++) {
      try {
        const q = await this.ensure(checkpoint);
        this.run.phase = 'training';
        const metrics = await trainerOn(q, this.timeouts)['trainer.step']({ run_id: runId, step: s, batch, manifest });
        this.run.phase = 'saving';
        const saved = await trainerIoOn(q, this.timeouts)['trainer.save']({ run_id: runId, step: s });
        return { metrics, saved, restarts };
      } catch (err) {
        if (!isTrainerGone(err) || restarts >= MAX_TRAINER_RESTARTS) throw err;
        // The trainer died: a new one loads the last checkpoint, so this step is applied exactly once.
        log.warn('trainer is gone; re-announcing and reloading the last checkpoint', { step: s, error: String(err) });
        this.queue = undefined;
      }
    }
  }
}
