/**
 * What a TrainRun shows and how it is steered: the flags its status is derived
 * from, the progress query, the pause/resume/stop updates with their validators,
 * and publishing (search attributes and the Web UI's details). Workflow code.
 */
import { setCurrentDetails, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import {
  SA,
  pauseUpdate,
  progressQuery,
  resumeUpdate,
  rolloutProgressSignal,
  stopAfterCurrentStepUpdate,
} from './messages';
import type { OutageWaitLimits } from '../contracts/outage';
import type { Phase, Progress, RunStatus } from '../contracts/run';
import type { StepSummary } from '../contracts/step';

export class RunControl {
  finalStatus: 'completed' | 'stopped' | undefined;
  started = false;
  waitingForTrainer = false;
  waitingForInference = false;
  waitingForStore = false;
  waitingForDisk = false;
  /** Set by StepRollouts' watchdog: rollouts pending, no rollout worker alive. */
  waitingForRolloutWorkers = false;
  phase: Phase = 'init';
  step = 0;
  maxSteps = 0;
  policyVersion = 0;
  lastStep: StepSummary | undefined;
  pauseRequested = false;
  stopRequested = false;
  prefetchedStep: number | undefined;
  /** How store/disk waits split between this history and OutageWait children (tests shorten them). */
  outageLimits: OutageWaitLimits | undefined;
  /** OutageWait children started by this execution (their workflow ids count them). */
  outageHandoffs = 0;
  readonly rolloutCounts = new Map<number, { done: number; total: number }>();
  private published = '';

  constructor(readonly runId: string) {}

  /** Derived, never assigned: whatever the run is doing, the flags say it. */
  status(): RunStatus {
    if (this.finalStatus) return this.finalStatus;
    if (this.stopRequested) return 'stopping';
    if (this.pauseRequested) return 'paused';
    if (this.waitingForStore) return 'waiting-for-store';
    if (this.waitingForDisk) return 'waiting-for-disk';
    if (this.waitingForInference) return 'waiting-for-inference';
    if (this.waitingForRolloutWorkers) return 'waiting-for-rollout-workers';
    if (this.waitingForTrainer) return 'waiting-for-trainer';
    return this.started ? 'running' : 'starting';
  }

  progress(): Progress {
    return {
      runId: this.runId,
      step: this.step,
      maxSteps: this.maxSteps,
      phase: this.phase,
      status: this.status(),
      rolloutsDone: this.rolloutCounts.get(this.step)?.done ?? 0,
      rolloutsTotal: this.rolloutCounts.get(this.step)?.total ?? 0,
      policyVersion: this.policyVersion,
      lastStep: this.lastStep,
      prefetchedStep: this.prefetchedStep,
    };
  }

  /** Search attributes and the Web UI's details, rewritten only when they change (each upsert is an event). */
  publish(): void {
    const p = this.progress();
    const last = this.lastStep;
    const key = JSON.stringify([p.step, p.status, p.policyVersion, last?.meanReward]);
    if (key !== this.published) {
      this.published = key;
      upsertSearchAttributes([
        { key: SA.step, value: p.step },
        { key: SA.status, value: p.status },
        { key: SA.policyVersion, value: p.policyVersion },
        ...(last ? [{ key: SA.meanReward, value: last.meanReward }] : []),
      ]);
    }
    setCurrentDetails(detailsMarkdown({ ...p, lastReward: last?.meanReward, lastComponents: last?.components }));
  }

  /** Like setWaitingForInference, for the artifact store (StoreUnavailable). */
  setWaitingForStore(on: boolean): boolean {
    if (this.waitingForStore === on) return false;
    this.waitingForStore = on;
    this.publish();
    return true;
  }

  /** Like setWaitingForInference, for a full disk (DiskFull). */
  setWaitingForDisk(on: boolean): boolean {
    if (this.waitingForDisk === on) return false;
    this.waitingForDisk = on;
    this.publish();
    return true;
  }

  /** Sets a wait flag and publishes only when it changes; true when it did. */
  setWaitingForInference(on: boolean): boolean {
    if (this.waitingForInference === on) return false;
    this.waitingForInference = on;
    this.publish();
    return true;
  }

  installHandlers(): void {
    const runId = this.runId;
    setHandler(progressQuery, () => this.progress());
    setHandler(rolloutProgressSignal, (p) => {
      this.rolloutCounts.set(p.step, { done: p.done, total: p.total });
      if (p.waitingForInference !== undefined) this.setWaitingForInference(p.waitingForInference);
      if (p.waitingForDisk !== undefined) this.setWaitingForDisk(p.waitingForDisk);
      if (p.waitingForStore !== undefined) this.setWaitingForStore(p.waitingForStore);
      if (p.waitingForRolloutWorkers !== undefined && this.waitingForRolloutWorkers !== p.waitingForRolloutWorkers) {
        this.waitingForRolloutWorkers = p.waitingForRolloutWorkers;
        this.publish();
      }
    });
    setHandler(pauseUpdate, () => {
      this.pauseRequested = true;
      this.publish();
      return this.status();
    }, {
      validator: () => {
        if (this.finalStatus) throw new Error(`run ${runId} is ${this.finalStatus}; nothing to pause`);
        if (this.pauseRequested) throw new Error(`run ${runId} is already paused; send resume to continue`);
        if (this.stopRequested) throw new Error(`run ${runId} is stopping after the current step; it cannot be paused`);
      },
    });
    setHandler(resumeUpdate, () => {
      this.pauseRequested = false;
      this.publish();
      return this.status();
    }, {
      validator: () => {
        if (!this.pauseRequested) throw new Error(`run ${runId} is not paused (status ${this.status()}); nothing to resume`);
      },
    });
    setHandler(stopAfterCurrentStepUpdate, () => {
      this.stopRequested = true;
      // A paused run stops at once: it is between steps already.
      this.pauseRequested = false;
      this.publish();
      return this.status();
    }, {
      validator: () => {
        if (this.finalStatus) throw new Error(`run ${runId} is already ${this.finalStatus}`);
        if (this.stopRequested) throw new Error(`run ${runId} is already stopping after the current step`);
      },
    });
  }
}

/** A short markdown block for the Web UI (setCurrentDetails). */
export function detailsMarkdown(p: {
  runId: string; step: number; maxSteps: number; status: string; phase: string; policyVersion: number;
  rolloutsDone: number; rolloutsTotal: number; lastReward?: number; lastComponents?: Record<string, number>;
}): string {
  const lines = [
    `**Ratchet run \`${p.runId}\`** — ${p.status}`,
    '',
    `step ${p.step}/${p.maxSteps} · phase ${p.phase} · rollouts ${p.rolloutsDone}/${p.rolloutsTotal} · policy v${p.policyVersion}`,
  ];
  if (p.lastReward !== undefined) {
    const comps = Object.entries(p.lastComponents ?? {}).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(', ');
    lines.push('', `last step mean reward **${p.lastReward.toFixed(3)}**${comps ? ` (${comps})` : ''}`);
  }
  lines.push('', `\`ratchet status ${p.runId}\` · \`ratchet report ${p.runId}\``);
  return lines.join('\n');
}
