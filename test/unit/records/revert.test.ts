/**
 * Undoing a checkpoint fallback (issue 39, item 1) on a real local store: the records a revert voids and
 * restores, a step retrained after the wrong fallback no longer counting, and the refusals (a fallback that
 * was right, none to revert). The CLI's status guard is in test/unit/cli/restart.test.ts.
 */
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createMetricsActivities } from '../../../src/activities/metrics';
import { verifiedRestartState } from '../../../src/cli/restart';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { commitFallback, planFallback } from '../../../src/records/fallback';
import { commitRevert, planRevert, RevertError } from '../../../src/records/revert';
import { readRunRecords, readRunState } from '../../../src/records/runRecords';
import { ref } from '../../helpers/workflowFakes';

const logger = pino({ level: 'silent' });
const who = { identity: 'ops@host', reason: 'the fallback came from a 503', time: '2026-01-02T00:00:00.000Z' };

async function run3() {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-rev-'));
  const store = new LocalArtifactStore(root);
  const { recordStep } = createMetricsActivities({ store, logger });
  const rec = (s: number, extra: Partial<StepRecord> = {}): StepRecord => ({
    format: 'ratchet.step/v1', run_id: 'r', step: s, time: `2026-01-01T00:0${s}:00Z`, policy_version: s + 1,
    mean_reward: s, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
    mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: { loss: 1 }, timing_ms: {}, ...extra,
  });
  let state: RunStateFile | undefined;
  for (let s = 0; s < 3; s++) {
    const src = mkdtempSync(path.join(tmpdir(), 'ratchet-rev-src-'));
    mkdirSync(path.join(src, 'adapter'));
    writeFileSync(path.join(src, 'adapter', 'w.bin'), Buffer.alloc(32, s + 1));
    const checkpoint = await store.putDir(`runs/r/checkpoints/step-${s}`, src);
    state = { format: 'ratchet.run-state/v1', runId: 'r', configSha256: 'x', completedStep: s, nextStep: s + 1, policyVersion: s + 1, configRef: ref('config'), seed: 0, checkpoint };
    await recordStep({ record: rec(s, { checkpoint }), state });
  }
  return { store, state: state!, rec, recordStep };
}

describe('ratchet fallback revert (records)', () => {
  it('voids the wrong fallback\'s epoch (a step retrained in it too), restores the state before it, and a restart then verifies it', async () => {
    const { store, state, rec, recordStep } = await run3();
    const fb = await planFallback(store, state, 'StoreUnavailableError: 503', 'restart', '2026-01-01T01:00:00.000Z');
    // planFallback keeps the bad step's own checkpoint out: it falls back to step 1, step 2 retrained.
    expect(fb.record).toMatchObject({ epoch: 1, used: { step: 1 }, retrained_steps: [2] });
    await commitFallback(store, fb);
    // The run went on after it: step 2 retrained in epoch 1.
    await recordStep({ record: rec(2, { epoch: 1, time: '2026-01-01T02:00:00Z', mean_reward: 9 }), state: { ...fb.state, completedStep: 2, nextStep: 3, policyVersion: 3 } });
    expect((await readRunRecords(store, 'r')).steps.map((r) => [r.step, r.epoch ?? 0])).toEqual([[0, 0], [1, 0], [2, 1]]);

    const plan = await planRevert(store, 'r', who);
    expect(plan.record).toMatchObject({ format: 'ratchet.fallback-revert/v1', epoch: 2, reverts: 1, ...who, restored: { step: 2, checkpoint: state.checkpoint } });
    await commitRevert(store, plan);
    const after = await readRunRecords(store, 'r');
    // Step 2's record of epoch 0 wins again; the retrain of epoch 1 is void, and stays on record.
    expect(after.steps.map((r) => [r.step, r.epoch ?? 0, r.mean_reward])).toEqual([[0, 0, 0], [1, 0, 1], [2, 0, 2]]);
    expect(after.all.filter((r) => r.step === 2)).toHaveLength(2);
    const now = (await readRunState(store, 'r'))!;
    expect(now).toEqual({ ...state, epoch: 2 });
    // `ratchet restart` resumes from it: it verifies, no new fallback.
    expect((await verifiedRestartState(store, now)).fallback).toBeUndefined();
    // A step trained after the revert (epoch 2) counts.
    await recordStep({ record: rec(3, { epoch: 2, time: '2026-01-03T00:00:00Z' }), state: { ...now, completedStep: 3, nextStep: 4 } });
    expect((await readRunRecords(store, 'r')).steps.map((r) => r.step)).toEqual([0, 1, 2, 3]);
    await expect(planRevert(store, 'r', who)).rejects.toThrow(/reverted already/);
  });

  it('refuses a fallback that was right (the bad checkpoint does not verify), --epoch naming another, and a run with none', async () => {
    const { store, state } = await run3();
    await expect(planRevert(store, 'r', who)).rejects.toThrow(/no checkpoint fallback on record/);
    const f = path.join(new URL(state.checkpoint!.uri).pathname, 'adapter', 'w.bin');
    const b = readFileSync(f);
    b[0] = b[0]! ^ 1;
    writeFileSync(f, b);
    await commitFallback(store, await planFallback(store, state, 'corrupt', 'restart', '2026-01-01T01:00:00.000Z'));
    await expect(planRevert(store, 'r', { ...who, epoch: 3 })).rejects.toThrow(/--epoch 3: the newest fallback of run "r" is epoch 1.*Fix: --epoch 1/);
    const err = await planRevert(store, 'r', who).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(RevertError);
    expect(String(err)).toMatch(/does not verify, so the fallback was right: .*w\.bin is corrupt/);
  });
});
