/**
 * Which of a run's appended records count. Records are never rewritten (runs/<run>/records/), so a
 * step can have several: a redone step (the run resumed before its state moved, another batch), or
 * a step retrained after a checkpoint fallback. The rules, for every reader (status, report,
 * restart, invariants, metrics):
 *
 * - a fallback of epoch e voids every record of an epoch below e for a step after its used step;
 * - a revert of that fallback (`ratchet fallback revert`) voids every record of epoch e instead, and
 *   the fallback voids nothing more;
 * - of the rest, a step's winner has the highest epoch, then the latest time (a redo is later);
 * - the run's state is the state record with the highest (epoch, completed step): a stale attempt
 *   (an older step, or the epoch before a fallback) can never win over a newer one.
 *
 * Pure (no I/O): unit-tested with tables of records.
 */
import type { FallbackRecord, FallbackRevertRecord, RunStateFile, StepRecord } from '../contracts/records';

const epochOf = (r: { epoch?: number }): number => r.epoch ?? 0;

/** Whether a record of `epoch` for `step` was voided by a later fallback, or belongs to a reverted fallback's epoch. */
export function isVoided(step: number, epoch: number, fallbacks: readonly FallbackRecord[], reverts: readonly FallbackRevertRecord[] = []): boolean {
  const reverted = new Set(reverts.map((r) => r.reverts));
  if (reverted.has(epoch)) return true;
  return fallbacks.some((f) => !reverted.has(f.epoch) && f.epoch > epoch && step > (f.used?.step ?? -1));
}

/** One winning record per step, sorted by step. */
export function winningSteps(records: readonly StepRecord[], fallbacks: readonly FallbackRecord[] = [], reverts: readonly FallbackRevertRecord[] = []): StepRecord[] {
  const best = new Map<number, StepRecord>();
  for (const r of records) {
    if (isVoided(r.step, epochOf(r), fallbacks, reverts)) continue;
    const held = best.get(r.step);
    if (!held || beats(r, held)) best.set(r.step, r);
  }
  return [...best.values()].sort((a, b) => a.step - b.step);
}

function beats(a: StepRecord, b: StepRecord): boolean {
  if (epochOf(a) !== epochOf(b)) return epochOf(a) > epochOf(b);
  return Date.parse(a.time) > Date.parse(b.time);
}

/** The run's current state: the highest (epoch, completed step); undefined for none. */
export function winningState(states: readonly RunStateFile[]): RunStateFile | undefined {
  let best: RunStateFile | undefined;
  for (const s of states) {
    if (!best || epochOf(s) > epochOf(best) || (epochOf(s) === epochOf(best) && s.completedStep > best.completedStep)) best = s;
  }
  return best;
}

/** The steps whose winning record was trained in a later epoch than a voided one: retrained after a fallback. */
export function retrainedSteps(records: readonly StepRecord[], fallbacks: readonly FallbackRecord[], reverts: readonly FallbackRevertRecord[] = []): number[] {
  return winningSteps(records, fallbacks, reverts).filter((r) => epochOf(r) > 0 && records.some((o) => o.step === r.step && epochOf(o) < epochOf(r))).map((r) => r.step);
}
