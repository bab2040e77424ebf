/**
 * The soak's fault schedule: which fault, in which phase of which step. Pure and
 * seeded, so a soak that found a bug can be replayed fault for fault.
 *
 * Every kind and every phase are covered as soon as there are as many faults as
 * kinds (resp. phases): each is a round of a seeded shuffle, not a random draw.
 */
import { mulberry32 } from '../shared/random';
import type { Phase } from '../contracts';

export const FAULT_KINDS = [
  'kill-main', // kill -9 of the workflow worker
  'kill-rollout', // kill -9 of the rollout worker (its sandboxes are orphaned)
  'kill-trainer', // kill -9 of the trainer worker (the model in memory is lost)
  'hang-vllm', // SIGSTOP of the inference server for a while, then SIGCONT
  'hang-trainer', // SIGSTOP of the trainer for a while, then SIGCONT
  'restart-temporal', // the Temporal server stops and starts again
  'restart-dockerd', // dockerd stops (every sandbox dies with it) and starts again
] as const;
/**
 * Network partitions on the local stack (`npm run soak -- --partitions`): iptables DROP of
 * the port on the loopback, so clients hang (no refusal) until the cut is healed, after
 * --partition-s. Not in FAULT_KINDS, so a seed's schedule of the crash faults is unchanged.
 */
export const PARTITION_KINDS = [
  'partition-inference', // nothing reaches vLLM (port 8000)
  'partition-temporal', // nothing reaches the Temporal server (port 7233): every worker, the soak too
] as const;
/**
 * Incidents an operator fixes (issue 39; `npm run soak -- --incidents`), each repaired after --incident-s:
 * a sick rollout host (its dockerd stopped, or the sandbox image removed then restored), a trainer
 * raising an untyped error (a CUDA-style RuntimeError on its next step, once: it fences itself and its
 * replacement trains the step), and saves slower than trainer_stall_s (the trainer's reads of the run's
 * artifacts slowed for a while; the save beats its progress), and the store's credentials refused (the
 * MinIO key every worker uses disabled, as a rotation or an expiry leaves it, then enabled again: the run
 * waits with status waiting-for-store; a soak that plans it runs on MinIO, src/soak/storeKey.ts). Not in
 * FAULT_KINDS, so a seed's schedule of the crash faults is unchanged.
 */
export const INCIDENT_KINDS = [
  'sick-host-dockerd', // dockerd stopped for --incident-s: the rollout host takes itself out of service
  'sick-host-image', // the sandbox image's tag removed for --incident-s, then restored
  'trainer-untyped-error', // the trainer restarted armed to raise RuntimeError('CUDA error: ...') once
  'slow-save', // the trainer restarted on a slow disk for the run's artifacts, for a while
  'store-credentials', // the workers' MinIO key disabled for --incident-s (S3 403 InvalidAccessKeyId), then enabled
] as const;
/** Losing one inference replica of two for good (`--replica-loss`): once per soak, never planned by the seed. */
export const REPLICA_LOSS = 'lose-replica' as const;
export type FaultKind = (typeof FAULT_KINDS)[number] | (typeof PARTITION_KINDS)[number] | (typeof INCIDENT_KINDS)[number] | typeof REPLICA_LOSS;

/** The phases of one step, in the order a step goes through them. */
export const STEP_PHASES = ['sampling', 'rollouts', 'building-batch', 'training', 'saving', 'weight-sync', 'metrics'] as const satisfies readonly Phase[];
export type StepPhase = (typeof STEP_PHASES)[number];

/** Phases a fault is aimed at: every phase of a step that lasts long enough to be seen by polling. */
export const TARGET_PHASES: readonly StepPhase[] = ['rollouts', 'building-batch', 'training', 'saving', 'weight-sync'];

export interface PlannedFault {
  index: number;
  kind: FaultKind;
  step: number;
  phase: StepPhase;
}

function shuffled<T>(items: readonly T[], rand: () => number): T[] {
  const out = [...items];
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [out[i], out[j]] = [out[j]!, out[i]!];
  }
  return out;
}

/** `n` items drawn round by round from seeded shuffles of `items`: each appears once per round. */
function rounds<T>(items: readonly T[], n: number, rand: () => number): T[] {
  const out: T[] = [];
  while (out.length < n) out.push(...shuffled(items, rand));
  return out.slice(0, n);
}

export interface ScheduleOptions {
  seed: number;
  faults: number;
  steps: number;
  kinds?: readonly FaultKind[];
  phases?: readonly StepPhase[];
}

/**
 * Spreads `faults` over steps 0..steps-2 (the last step is left alone so the run's
 * end is checked on a settled stack), in step order and, within a step, phase order.
 */
export function planFaults({ seed, faults, steps, kinds = FAULT_KINDS, phases = TARGET_PHASES }: ScheduleOptions): PlannedFault[] {
  if (!Number.isInteger(steps) || steps < 2) throw new Error(`soak: --steps must be an integer >= 2 (got ${steps}); the last step runs without faults`);
  if (!Number.isInteger(faults) || faults < 0) throw new Error(`soak: --faults must be an integer >= 0 (got ${faults})`);
  if (kinds.length === 0) throw new Error('soak: no fault kinds to inject');
  const rand = mulberry32(seed);
  const faultSteps = steps - 1;
  const chosenKinds = rounds(kinds, faults, rand);
  const chosenPhases = rounds(phases, faults, rand);
  const stepOf = rounds(Array.from({ length: faultSteps }, (_, i) => i), faults, rand);
  return chosenKinds
    .map((kind, i) => ({ kind, phase: chosenPhases[i]!, step: stepOf[i]! }))
    .sort((a, b) => a.step - b.step || STEP_PHASES.indexOf(a.phase) - STEP_PHASES.indexOf(b.phase))
    .map((f, index) => ({ index, ...f }));
}

/** What faultDue reads of the run's progress query. */
export interface RunPhase {
  step: number;
  maxSteps: number;
  phase: Phase;
  /** The next step whose rollouts run while this one trains (async_level >= 1). */
  prefetchedStep?: number;
}

/** Whether the run is in `phase` now. With async_level >= 1 the next step's rollouts run while this one trains: rollouts in flight either way. */
function inPhase(p: RunPhase, phase: StepPhase): boolean {
  return p.phase === phase || (phase === 'rollouts' && p.prefetchedStep !== undefined);
}

/**
 * Whether planned fault `f` hits the run now: from its planned step on, in its planned phase. A fault running
 * late (the run is past its planned step, held up by the recoveries of the faults before it) takes the next
 * target phase instead, so the faults queued behind slow recoveries land before the run ends (a 42-step soak
 * of 40 faults left its last 2 uninjected). The last step is never faulted, so the run ends on a settled stack.
 */
export function faultDue(p: RunPhase, f: Pick<PlannedFault, 'step' | 'phase'>): boolean {
  if (p.step >= p.maxSteps - 1 || p.step < f.step) return false;
  if (inPhase(p, f.phase)) return true;
  return p.step > f.step && TARGET_PHASES.some((phase) => inPhase(p, phase));
}

/** Where a run is: comparable, so "has the run moved past the point where the fault hit" is one comparison. */
export interface RunPoint {
  step: number;
  phase: Phase;
  rolloutsDone: number;
}

const phaseRank = (phase: Phase): number => {
  const i = (STEP_PHASES as readonly Phase[]).indexOf(phase);
  // 'init' and 'idle' come before every phase of the step they show: the run moves to step n+1, then idles.
  return i >= 0 ? i : -1;
};

/** -1, 0 or 1 as `a` is before, at or after `b`. */
export function comparePoints(a: RunPoint, b: RunPoint): number {
  const d = a.step - b.step || phaseRank(a.phase) - phaseRank(b.phase) || a.rolloutsDone - b.rolloutsDone;
  return Math.sign(d);
}
