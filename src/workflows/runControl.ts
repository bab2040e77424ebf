/**
 * What a TrainRun shows and how it is steered: the flags its status is derived
 * from, the progress query, the pause/resume/stop updates with their validators,
 * and publishing (search attributes and the Web UI's details). Workflow code.
 */
import { setCurrentDetails, setHandler, upsertSearchAttributes } from '@temporalio/workflow';
import {
  SA,
  controlUpdates,
  progressQuery,
  rolloutProgressSignal,
  setSettingsUpdate,
} from './messages';
import type { OutageWaitLimits } from '../contracts/outage';
import type { ControlAction, RunOverrides } from '../contracts/records';
import type { ControlRequest, LastEval, Phase, Progress, RunStatus, SettingsChange } from '../contracts/run';
import { boundedHosts, type StepSummary, type UnhealthyRolloutHost } from '../contracts/step';
import { COST_KEYS, type Cost, type CostKey } from '../shared/cost';
import { EVAL_EVERY_STEPS_MAX } from '../config/evalBounds';

export class RunControl {
  finalStatus: 'completed' | 'stopped' | undefined;
  started = false;
  waitingForTrainer = false;
  waitingForInference = false;
  waitingForStore = false;
  waitingForDisk = false;
  /** Set by StepRollouts' watchdog: rollouts pending, no rollout worker alive. */
  waitingForRolloutWorkers = false;
  /** With waitingForRolloutWorkers: the hosts that took themselves out of service, and why (bounded by the signal's sender). */
  unhealthyRolloutHosts: UnhealthyRolloutHost[] = [];
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
  /** Settings changed with `ratchet set`, in effect for the step now running. */
  overrides: RunOverrides = {};
  /** Accepted `set` changes, in effect from the next step boundary (applyPendingOverrides). */
  pendingOverrides: RunOverrides = {};
  /** The run's cost up to its last recorded step (TrainRun adds each step's). */
  cost: Cost | undefined;
  /** Set while the run waits at a step boundary because its cost reached a budget. */
  budgetExhausted: { key: CostKey; spent: number; budget: number } | undefined;
  /** The newest in-run eval sweep (trainRun.ts startEvalSweep), for the progress query. */
  lastEval: LastEval | undefined;
  /** In-run eval sweeps this execution started that have not finished: workflow id -> the policy version they evaluate. */
  readonly evalsRunning = new Map<string, number>();
  /** Versions the previous execution's sweeps were evaluating when it continued as new (ResumeState.evalVersions). */
  carriedEvalVersions: number[] = [];
  /** Control actions accepted since the last step record (takeControls empties it into the next one). */
  private unrecorded: ControlAction[] = [];
  /** The newest accepted actions, for the progress query. */
  private recent: ControlAction[] = [];
  private published = '';
  /** Why this run cannot take in-run eval sweeps, if it cannot (a full fine-tuning run: no adapter to evaluate beside training). */
  evalSweepsRefused?: string;

  constructor(readonly runId: string) {}

  /** Derived, never assigned: whatever the run is doing, the flags say it. */
  status(): RunStatus {
    if (this.finalStatus) return this.finalStatus;
    if (this.stopRequested) return 'stopping';
    if (this.budgetExhausted) return 'budget-exhausted';
    if (this.pauseRequested) return 'paused';
    if (this.waitingForStore) return 'waiting-for-store';
    if (this.waitingForDisk) return 'waiting-for-disk';
    if (this.waitingForInference) return 'waiting-for-inference';
    if (this.waitingForRolloutWorkers) return this.unhealthyRolloutHosts.length ? 'waiting-for-healthy-rollout-hosts' : 'waiting-for-rollout-workers';
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
      ...(this.recent.length ? { controls: [...this.recent] } : {}),
      ...(Object.keys(this.overrides).length ? { overrides: { ...this.overrides } } : {}),
      ...(Object.keys(this.pendingOverrides).length ? { pendingOverrides: { ...this.pendingOverrides } } : {}),
      ...(this.cost ? { cost: { ...this.cost } } : {}),
      ...(this.budgetExhausted ? { budgetExhausted: { ...this.budgetExhausted } } : {}),
      ...(this.lastEval ? { lastEval: { ...this.lastEval } } : {}),
      ...(this.waitingForRolloutWorkers && this.unhealthyRolloutHosts.length ? { unhealthyRolloutHosts: [...this.unhealthyRolloutHosts] } : {}),
    };
  }

  /** At a step boundary: accepted `set` changes take effect; true when any did. */
  applyPendingOverrides(): boolean {
    if (!Object.keys(this.pendingOverrides).length) return false;
    this.overrides = mergeOverrides(this.overrides, this.pendingOverrides);
    this.pendingOverrides = {};
    return true;
  }

  /** The actions to write into the step record now being written (each is recorded once). */
  takeControls(): ControlAction[] | undefined {
    const out = this.unrecorded;
    this.unrecorded = [];
    return out.length ? out : undefined;
  }

  private audit(action: ControlAction['action'], req: ControlRequest | undefined, changes?: RunOverrides): void {
    // new Date() is the workflow clock in workflow code: deterministic on replay.
    const entry: ControlAction = {
      action, identity: req?.identity || 'unknown', reason: req?.reason ?? '', time: new Date().toISOString(), step: this.step,
      ...(changes ? { changes } : {}),
    };
    this.unrecorded.push(entry);
    this.recent = [...this.recent, entry].slice(-20);
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
      if (p.waitingForRolloutWorkers !== undefined) {
        const hosts = p.waitingForRolloutWorkers ? boundedHosts(p.unhealthyRolloutHosts ?? []) : [];
        if (this.waitingForRolloutWorkers !== p.waitingForRolloutWorkers || JSON.stringify(hosts) !== JSON.stringify(this.unhealthyRolloutHosts)) {
          this.waitingForRolloutWorkers = p.waitingForRolloutWorkers;
          this.unhealthyRolloutHosts = hosts;
          this.publish();
        }
      }
    });
    setHandler(controlUpdates.pause, (req?: ControlRequest) => {
      this.pauseRequested = true;
      this.audit('pause', req);
      this.publish();
      return this.status();
    }, {
      validator: (req?: ControlRequest) => {
        validateRequest(req);
        if (this.finalStatus) throw new Error(`run ${runId} is ${this.finalStatus}; nothing to pause`);
        if (this.pauseRequested) throw new Error(`run ${runId} is already paused; send resume to continue`);
        if (this.stopRequested) throw new Error(`run ${runId} is stopping after the current step; it cannot be paused`);
      },
    });
    setHandler(controlUpdates.resume, (req?: ControlRequest) => {
      this.pauseRequested = false;
      this.audit('resume', req);
      this.publish();
      return this.status();
    }, {
      validator: (req?: ControlRequest) => {
        validateRequest(req);
        if (!this.pauseRequested && this.budgetExhausted) {
          const b = this.budgetExhausted;
          throw new Error(`run ${runId} is budget-exhausted (${b.key} ${b.spent} of ${b.budget}); resume does not lift a budget. ` +
            `Fix: ratchet set ${runId} --budget ${b.key}=<more than ${b.spent}> --reason "..."`);
        }
        if (!this.pauseRequested) throw new Error(`run ${runId} is not paused (status ${this.status()}); nothing to resume`);
      },
    });
    setHandler(controlUpdates.stop, (req?: ControlRequest) => {
      this.stopRequested = true;
      // A paused run stops at once: it is between steps already.
      this.pauseRequested = false;
      this.audit('stop', req);
      this.publish();
      return this.status();
    }, {
      validator: (req?: ControlRequest) => {
        validateRequest(req);
        if (this.finalStatus) throw new Error(`run ${runId} is already ${this.finalStatus}`);
        if (this.stopRequested) throw new Error(`run ${runId} is already stopping after the current step`);
      },
    });
    setHandler(setSettingsUpdate, (change) => {
      const changes = settingsOf(change);
      this.pendingOverrides = mergeOverrides(this.pendingOverrides, changes);
      this.audit('set', change, changes);
      this.publish();
      return this.status();
    }, {
      validator: (change) => {
        validateRequest(change);
        if (this.finalStatus) throw new Error(`run ${runId} is ${this.finalStatus}; nothing to change`);
        if (this.stopRequested) throw new Error(`run ${runId} is stopping after the current step; its settings no longer change`);
        validateSettings(change);
        if (this.evalSweepsRefused && (change.eval_every_steps ?? 0) > 0) throw new Error(`eval_every_steps: ${this.evalSweepsRefused}`);
      },
    });
  }
}

const MAX_REASON = 1000;

/** Rejects a malformed reason or identity (the validator's message goes back to the caller). */
export function validateRequest(req: ControlRequest | undefined): void {
  if (req === undefined || req === null) return;
  if (typeof req !== 'object') throw new Error('a control request is an object { reason?, identity? }');
  if (req.reason !== undefined && (typeof req.reason !== 'string' || req.reason.length > MAX_REASON)) {
    throw new Error(`reason must be text of at most ${MAX_REASON} characters`);
  }
  if (req.identity !== undefined && (typeof req.identity !== 'string' || req.identity.length > 200)) {
    throw new Error('identity must be text of at most 200 characters');
  }
}

/** The settings a `set` asks for, without its reason and identity. */
function settingsOf(change: SettingsChange): RunOverrides {
  return {
    ...(change.learning_rate !== undefined ? { learning_rate: change.learning_rate } : {}),
    ...(change.async_level !== undefined ? { async_level: change.async_level } : {}),
    ...(change.eval_every_steps !== undefined ? { eval_every_steps: change.eval_every_steps } : {}),
    ...(change.budget !== undefined ? { budget: { ...change.budget } } : {}),
  };
}

/** b over a; budgets merge key by key (raising one budget keeps the others). */
export function mergeOverrides(a: RunOverrides, b: RunOverrides): RunOverrides {
  const out: RunOverrides = { ...a, ...b };
  if (a.budget || b.budget) out.budget = { ...(a.budget ?? {}), ...(b.budget ?? {}) };
  return out;
}

const SETTINGS = ['learning_rate', 'async_level', 'eval_every_steps', 'budget'] as const;

/**
 * The same bounds as the config's (src/config/schema.ts: trainer.optim.lr, orchestrator.async_level,
 * eval.every_steps), with the fix. Pure: `ratchet set` runs it before sending, the update's validator again.
 */
export function validateSettings(change: SettingsChange): void {
  if (!change || typeof change !== 'object') throw new Error('set needs { learning_rate?, async_level?, eval_every_steps?, budget?, reason?, identity? }');
  const known = new Set<string>([...SETTINGS, 'reason', 'identity']);
  const unknown = Object.keys(change).filter((k) => !known.has(k));
  if (unknown.length) throw new Error(`cannot change ${unknown.join(', ')} on a running run: only ${SETTINGS.join(', ')}`);
  if (SETTINGS.every((k) => change[k] === undefined)) {
    throw new Error(`nothing to change: give ${SETTINGS.join(', ')} (one or more)`);
  }
  if (change.budget !== undefined) validateBudget(change.budget);
  const lr = change.learning_rate;
  if (lr !== undefined && (typeof lr !== 'number' || !Number.isFinite(lr) || lr < 0 || lr > 1)) {
    throw new Error(`learning_rate must be a number from 0 to 1 (got ${String(lr)})${typeof lr === 'number' && lr < 0 ? ': a negative rate would climb the loss' : ''}`);
  }
  const a = change.async_level;
  if (a !== undefined && (typeof a !== 'number' || !Number.isInteger(a) || a < 0 || a > 8)) {
    throw new Error(`async_level must be a whole number from 0 to 8 (got ${String(a)})`);
  }
  const e = change.eval_every_steps;
  if (e !== undefined && (typeof e !== 'number' || !Number.isInteger(e) || e < 0 || e > EVAL_EVERY_STEPS_MAX)) {
    throw new Error(`eval_every_steps must be a whole number of steps from 0 (off) to ${EVAL_EVERY_STEPS_MAX} (got ${String(e)}): ` +
      'an eval sweep starts after every N-th step (ratchet set <run> --eval-every N)');
  }
}

/** The same bounds as [budget]'s (src/config/schema.ts): known figures, each a finite number above 0. */
export function validateBudget(budget: unknown): void {
  if (!budget || typeof budget !== 'object' || Array.isArray(budget)) throw new Error('budget must be an object { <figure>: <number> }');
  const entries = Object.entries(budget as Record<string, unknown>);
  if (!entries.length) throw new Error('budget names no figure: give e.g. { sandbox_cpu_s: 3600 }');
  for (const [k, v] of entries) {
    if (!(COST_KEYS as readonly string[]).includes(k)) throw new Error(`budget: unknown figure ${k}; the figures are ${COST_KEYS.join(', ')}`);
    if (typeof v !== 'number' || !Number.isFinite(v) || v <= 0) throw new Error(`budget ${k} must be a number above 0 (got ${String(v)})`);
  }
}

/** A short markdown block for the Web UI (setCurrentDetails). */
export function detailsMarkdown(p: {
  runId: string; step: number; maxSteps: number; status: string; phase: string; policyVersion: number;
  rolloutsDone: number; rolloutsTotal: number; lastReward?: number; lastComponents?: Record<string, number>;
  budgetExhausted?: { key: string; spent: number; budget: number };
  unhealthyRolloutHosts?: { host: string; error: string }[];
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
  if (p.budgetExhausted) {
    const b = p.budgetExhausted;
    lines.push('', `**budget reached**: ${b.key} ${b.spent} of ${b.budget}. Raise it: \`ratchet set ${p.runId} --budget ${b.key}=<value> --reason "..."\``);
  }
  for (const h of p.unhealthyRolloutHosts ?? []) lines.push('', `**rollout host ${h.host} out of service**: ${h.error}`);
  lines.push('', `\`ratchet status ${p.runId}\` · \`ratchet report ${p.runId}\``);
  return lines.join('\n');
}
