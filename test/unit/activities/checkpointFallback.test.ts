/**
 * Checkpoint fallback (issue 25, hole 6) on a real local store: a corrupt newest checkpoint (a flipped
 * byte in its adapter or its trainer state) falls back to the newest one that verifies; the fallback is
 * on record (bad, used, retrained steps), the later steps' old records are void, and each retrained step
 * has one winning record.
 */
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createMetricsActivities } from '../../../src/activities/metrics';
import { createCheckpointFallbackActivities } from '../../../src/activities/checkpointFallback';
import { verifiedRestartState } from '../../../src/cli/restart';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { readRunRecords, readRunState } from '../../../src/records/runRecords';
import { ref } from '../../helpers/workflowFakes';

const logger = pino({ level: 'silent' });

/** A run with steps 0..2 trained, each with a real checkpoint directory (adapter/ + trainer_state.json) and its records. */
async function runWithCheckpoints(steps = 3) {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-fallback-'));
  const store = new LocalArtifactStore(root);
  const { recordStep } = createMetricsActivities({ store, logger });
  const ckpts: { checkpoint: ArtifactRef; adapter: ArtifactRef }[] = [];
  let state: RunStateFile | undefined;
  for (let s = 0; s < steps; s++) {
    const src = mkdtempSync(path.join(tmpdir(), 'ratchet-ckpt-src-'));
    mkdirSync(path.join(src, 'adapter'));
    writeFileSync(path.join(src, 'adapter', 'adapter_model.safetensors'), Buffer.alloc(256, s + 1));
    writeFileSync(path.join(src, 'trainer_state.json'), JSON.stringify({ step: s, policy_version: s + 1 }));
    const key = `runs/r/checkpoints/step-${s}-${String(s).repeat(16)}`;
    const checkpoint = await store.putDir(key, src);
    // The adapter's own manifest, in place (the trainer writes one into adapter/ too).
    const adapter = await store.putDir(`${key}/adapter`, store.localPath(`${key}/adapter`));
    ckpts.push({ checkpoint, adapter });
    const record: StepRecord = {
      format: 'ratchet.step/v1', run_id: 'r', step: s, time: `2026-01-01T00:0${s}:00Z`, policy_version: s + 1,
      mean_reward: s / 10, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
      mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: { loss: 1 }, timing_ms: {}, checkpoint, adapter,
    };
    state = {
      format: 'ratchet.run-state/v1', runId: 'r', configSha256: 'x', completedStep: s, nextStep: s + 1,
      policyVersion: s + 1, configRef: ref('config'), seed: 0, checkpoint, adapter, lastMeanReward: s / 10,
    };
    await recordStep({ record, state });
  }
  return { root, store, ckpts, state: state!, recordStep };
}

function flipByte(file: string): void {
  const buf = readFileSync(file);
  buf[buf.length - 2] = buf[buf.length - 2]! ^ 0xff;
  writeFileSync(file, buf);
}

describe('checkpoint fallback', () => {
  it('ratchet restart: a flipped byte in the newest adapter falls back to the step before, on record; step 2 is retrained once', async () => {
    const { store, ckpts, state, recordStep } = await runWithCheckpoints();
    flipByte(path.join(new URL(ckpts[2]!.checkpoint.uri).pathname, 'adapter', 'adapter_model.safetensors'));
    const { state: from, fallback } = await verifiedRestartState(store, state, new Date('2026-01-01T01:00:00Z'));
    expect(from).toMatchObject({ completedStep: 1, nextStep: 2, policyVersion: 2, epoch: 1, checkpoint: ckpts[1]!.checkpoint, adapter: ckpts[1]!.adapter });
    expect(fallback).toMatchObject({ by: 'restart', epoch: 1, bad: { step: 2, checkpoint: ckpts[2]!.checkpoint }, used: { step: 1, checkpoint: ckpts[1]!.checkpoint }, retrained_steps: [2] });
    expect(fallback!.bad.error).toMatch(/adapter_model\.safetensors is corrupt/);
    // The run's state (what openRun resumes from) is the fallback's, whatever state.json said.
    expect(await readRunState(store, 'r')).toEqual(from);
    // Before the retrain, step 2 has no winner: its old record is void.
    expect((await readRunRecords(store, 'r')).steps.map((r) => r.step)).toEqual([0, 1]);
    // The retrain of step 2 (epoch 1) wins; the old record stays on record, not counted.
    const retrained = { ...(await readRunRecords(store, 'r')).all.find((r) => r.step === 2)!, time: '2026-01-01T02:00:00Z', mean_reward: 0.9, epoch: 1 };
    await recordStep({ record: retrained, state: { ...from, completedStep: 2, nextStep: 3, policyVersion: 3 } });
    const after = await readRunRecords(store, 'r');
    expect(after.steps.map((r) => [r.step, r.epoch ?? 0])).toEqual([[0, 0], [1, 0], [2, 1]]);
    expect(after.all.filter((r) => r.step === 2)).toHaveLength(2);
    expect(after.fallbacks).toHaveLength(1);
    expect((await readRunState(store, 'r'))).toMatchObject({ completedStep: 2, epoch: 1 });
    // A second restart finds the state verifies: no second fallback.
    expect((await verifiedRestartState(store, (await readRunState(store, 'r'))!)).fallback).toBeUndefined();
  });

  it('a corrupt trainer state in step 2 and a corrupt adapter in step 1: falls back to step 0, step 1 skipped on record', async () => {
    const { store, ckpts, state } = await runWithCheckpoints();
    flipByte(path.join(new URL(ckpts[2]!.checkpoint.uri).pathname, 'trainer_state.json'));
    flipByte(path.join(new URL(ckpts[1]!.checkpoint.uri).pathname, 'adapter', 'adapter_model.safetensors'));
    const { state: from, fallback } = await verifiedRestartState(store, state);
    expect(from).toMatchObject({ completedStep: 0, nextStep: 1, policyVersion: 1, epoch: 1 });
    expect(fallback!.skipped.map((s) => s.step)).toEqual([1]);
    expect(fallback!.retrained_steps).toEqual([1, 2]);
  });

  it('no checkpoint verifies: the run starts again from the base model, every step retrained', async () => {
    const { store, ckpts, state } = await runWithCheckpoints(1);
    flipByte(path.join(new URL(ckpts[0]!.checkpoint.uri).pathname, 'trainer_state.json'));
    const { state: from, fallback } = await verifiedRestartState(store, state);
    expect(from).toMatchObject({ completedStep: -1, nextStep: 0, policyVersion: 0, epoch: 1 });
    expect(from.checkpoint).toBeUndefined();
    expect(fallback!.used).toBeUndefined();
    expect(fallback!.retrained_steps).toEqual([0]);
  });

  it('the trainer-load activity: a checkpoint that verifies is not corruption (no fallback); a corrupt one falls back, idempotently', async () => {
    const { store, ckpts, state } = await runWithCheckpoints();
    const { fallBackToVerifiedCheckpoint } = createCheckpointFallbackActivities({ store, logger });
    const time = '2026-01-01T03:00:00.000Z';
    expect(await fallBackToVerifiedCheckpoint({ state, error: 'CheckpointError: another model', time })).toEqual({ fellBack: false });
    flipByte(path.join(new URL(ckpts[2]!.checkpoint.uri).pathname, 'adapter', 'adapter_model.safetensors'));
    const first = await fallBackToVerifiedCheckpoint({ state, error: 'ArtifactError: corrupt', time });
    const retry = await fallBackToVerifiedCheckpoint({ state, error: 'ArtifactError: corrupt', time });
    expect(first).toEqual(retry);
    expect(first).toMatchObject({ fellBack: true, record: { by: 'trainer-load', used: { step: 1 } }, state: { nextStep: 2, epoch: 1 } });
    expect(await store.list('runs/r/records/fallbacks')).toHaveLength(1);
  });
});
