/**
 * Checkpoint fallback (issue 25, hole 6): the run's newest checkpoint does not verify (a flipped byte in
 * its adapter, its trainer state, its manifest; a file gone), so the run goes back to the newest
 * checkpoint that does, by the sha256 its step records hold and each checkpoint's own MANIFEST.sha256.
 * The steps after it are trained again, once each: the fallback opens a new epoch, whose record voids
 * the later steps' records of earlier epochs (./winners.ts), and a state of the new epoch, which wins
 * over every earlier state, points at the good checkpoint. Only proven corruption falls back: a checkpoint
 * that cannot be read now (verifyDir) stops the plan, and nothing is written. Used by the trainer-load path inside
 * TrainRun (src/activities/checkpointFallback.ts) and by `ratchet restart`.
 */
import type { ArtifactRef } from '../artifacts/ref';
import { diskFullFrom, StoreConfigError, StoreUnavailableError } from '../artifacts/errors';
import { ArtifactIntegrityError, type ArtifactStore } from '../artifacts/store';
import type { FallbackRecord, RunStateFile, StepRecord } from '../contracts/records';
import { prunedCheckpoints } from './retention';
import { appendFallback, appendState, readRunRecords } from './runRecords';

/**
 * Whether a directory artifact (a checkpoint, an adapter) verifies: its manifest's sha256 and every file it
 * lists. Only proven corruption is an answer (ArtifactIntegrityError: bytes that do not match their sha256, a
 * manifest or file the store says is not there). Any other error is the store or this host failing now (a
 * 5xx, credentials refused, ENOSPC in the S3 cache, EMFILE, a failed allocation): it is thrown, typed so the
 * run waits (storeWait.ts), and no fallback is planned on it.
 */
export async function verifyDir(store: ArtifactStore, ref: ArtifactRef | undefined): Promise<string | undefined> {
  if (!ref) return undefined;
  try {
    await store.localDir(ref);
    return undefined;
  } catch (err) {
    if (err instanceof ArtifactIntegrityError) return err.message;
    throw transientVerifyError(store, ref, err);
  }
}

/**
 * A verification error that proves nothing about the bytes, as the store error the run waits on: DiskFull
 * and the store's own errors as they are; an errno (EMFILE, EIO, ENOMEM...) or a failed allocation as
 * StoreUnavailable, since the store cannot be read from this host now. Anything else (a bug) as it is.
 */
function transientVerifyError(store: ArtifactStore, ref: ArtifactRef, err: unknown): unknown {
  if (err instanceof StoreUnavailableError || err instanceof StoreConfigError) return err;
  const full = diskFullFrom(err);
  if (full) return full;
  const e = err as NodeJS.ErrnoException;
  if (typeof e?.code === 'string' || err instanceof RangeError) {
    return new StoreUnavailableError(store.url, `verifying ${ref.uri}: ${e.code ?? e.name}: ${e.message}`);
  }
  return err;
}

/** Why a state's checkpoint (or its adapter) does not verify; undefined when both do (or there is none). */
export async function checkpointProblem(store: ArtifactStore, s: { checkpoint?: ArtifactRef; adapter?: ArtifactRef }): Promise<string | undefined> {
  return (await verifyDir(store, s.checkpoint)) ?? (await verifyDir(store, s.adapter));
}

export interface FallbackPlan {
  record: FallbackRecord;
  state: RunStateFile;
}

/**
 * The fallback from `state` (whose checkpoint failed with `error`): the newest winning step record
 * before it whose checkpoint and adapter verify, or none (the base model, step 0 again). Reads only.
 */
export async function planFallback(store: ArtifactStore, state: RunStateFile, error: string, by: FallbackRecord['by'], time: string): Promise<FallbackPlan> {
  const { steps } = await readRunRecords(store, state.runId);
  const bad = state.checkpoint?.sha256;
  // Checkpoints [artifacts.retention] pruned are gone (or weights only) by design, not corrupt: never a target.
  const pruned = await prunedCheckpoints(store, state.runId);
  const candidates = steps
    .filter((r): r is StepRecord & { checkpoint: ArtifactRef } => r.step <= state.completedStep && !!r.checkpoint && r.checkpoint.sha256 !== bad && !pruned.has(r.checkpoint.sha256))
    .sort((a, b) => b.step - a.step);
  const skipped: FallbackRecord['skipped'] = [];
  let used: StepRecord & { checkpoint: ArtifactRef } | undefined;
  const tried = new Map<string, string | undefined>();
  for (const r of candidates) {
    // Skipped steps (a step fault) carry the checkpoint before them: verify each checkpoint once.
    if (!tried.has(r.checkpoint.sha256)) tried.set(r.checkpoint.sha256, await checkpointProblem(store, r));
    const problem = tried.get(r.checkpoint.sha256);
    if (problem === undefined) {
      used = r;
      break;
    }
    skipped.push({ step: r.step, error: problem });
  }
  const epoch = (state.epoch ?? 0) + 1;
  const usedStep = used?.step ?? -1;
  const retrained = Array.from({ length: Math.max(0, state.completedStep - usedStep) }, (_, i) => usedStep + 1 + i);
  const record: FallbackRecord = {
    format: 'ratchet.checkpoint-fallback/v1', run_id: state.runId, epoch, time, by,
    bad: { checkpoint: state.checkpoint, adapter: state.adapter, step: state.completedStep, error },
    ...(used ? { used: { checkpoint: used.checkpoint, adapter: used.adapter, step: used.step, policy_version: used.policy_version } } : {}),
    skipped, retrained_steps: retrained,
  };
  const next: RunStateFile = {
    ...state,
    completedStep: usedStep, nextStep: usedStep + 1,
    policyVersion: used?.policy_version ?? 0,
    checkpoint: used?.checkpoint, adapter: used?.adapter,
    lastMeanReward: used?.mean_reward,
    epoch,
  };
  if (!used) {
    delete next.checkpoint;
    delete next.adapter;
    delete next.lastMeanReward;
  }
  return { record, state: next };
}

/** Writes the fallback: its record first (what a reader must know to void the old steps), then the new state. */
export async function commitFallback(store: ArtifactStore, plan: FallbackPlan): Promise<void> {
  await appendFallback(store, plan.record);
  await appendState(store, plan.state);
}
