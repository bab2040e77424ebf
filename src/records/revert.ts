/**
 * Undoing a checkpoint fallback (`ratchet fallback revert`): a fallback committed on an error that was
 * not corruption (older code took any error while verifying for corruption) rolled the run back for nothing. The
 * revert puts back the state the run had before it, after checking that state's checkpoint verifies,
 * and records who did it and why. Records stay append-only: the revert is a record of a new epoch that
 * voids the reverted fallback's epoch (./winners.ts), then a state of that new epoch.
 */
import type { ArtifactStore } from '../artifacts/store';
import type { FallbackRevertRecord, RunStateFile } from '../contracts/records';
import { checkpointProblem } from './fallback';
import { appendRevert, appendState, readRunRecords, readStateRecords } from './runRecords';
import { winningState } from './winners';

/** Why a revert cannot be made, with what to do instead. */
export class RevertError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RevertError';
  }
}

export interface RevertPlan {
  record: FallbackRevertRecord;
  state: RunStateFile;
}

/**
 * The revert of the run's newest fallback (`epoch`, when given, must name it). Reads only. Throws RevertError
 * when there is none, it was reverted already, the state before it is not on record, or that state's
 * checkpoint is corrupt (the fallback was right); a store that cannot be read throws its own error.
 */
export async function planRevert(store: ArtifactStore, runId: string,
  req: { identity: string; reason: string; time: string; epoch?: number }): Promise<RevertPlan> {
  const { fallbacks, reverts } = await readRunRecords(store, runId);
  if (!fallbacks.length) throw new RevertError(`run "${runId}" has no checkpoint fallback on record (${store.url}); nothing to revert`);
  const newest = fallbacks.reduce((a, b) => (b.epoch > a.epoch ? b : a));
  const top = Math.max(newest.epoch, ...reverts.map((r) => r.epoch));
  if (req.epoch !== undefined && req.epoch !== newest.epoch) {
    throw new RevertError(`--epoch ${req.epoch}: the newest fallback of run "${runId}" is epoch ${newest.epoch}; only the newest can be reverted. Fix: --epoch ${newest.epoch}, or leave --epoch out`);
  }
  if (reverts.some((r) => r.reverts === newest.epoch) || top > newest.epoch) {
    throw new RevertError(`the newest fallback of run "${runId}" (epoch ${newest.epoch}) was reverted already, or a later revert stands; nothing to revert`);
  }
  const before = winningState((await readStateRecords(store, runId)).filter((s) => (s.epoch ?? 0) < newest.epoch));
  if (!before || before.completedStep !== newest.bad.step || before.checkpoint?.sha256 !== newest.bad.checkpoint?.sha256) {
    throw new RevertError(`the state run "${runId}" had before its fallback of epoch ${newest.epoch} (step ${newest.bad.step}, checkpoint ${newest.bad.checkpoint?.uri ?? 'none'}) ` +
      `is not among its state records${before ? ` (the newest before it: step ${before.completedStep})` : ''}; a revert would not restore it. Fix: restart the run as it is (ratchet restart ${runId})`);
  }
  const problem = await checkpointProblem(store, before);
  if (problem !== undefined) {
    throw new RevertError(`the checkpoint of step ${before.completedStep} does not verify, so the fallback was right: ${problem}`);
  }
  const epoch = top + 1;
  const record: FallbackRevertRecord = {
    format: 'ratchet.fallback-revert/v1', run_id: runId, epoch, reverts: newest.epoch, time: req.time, identity: req.identity, reason: req.reason,
    restored: { step: before.completedStep, checkpoint: before.checkpoint, adapter: before.adapter, policy_version: before.policyVersion },
  };
  return { record, state: { ...before, epoch } };
}

/** Writes the revert: its record first (what voids the reverted epoch), then the restored state. */
export async function commitRevert(store: ArtifactStore, plan: RevertPlan): Promise<void> {
  await appendRevert(store, plan.record);
  await appendState(store, plan.state);
}
