/**
 * [artifacts.retention] (issue 42): the plan keeps what the run may still need and deletes the rest; applied
 * after each recorded step on a real local store, it leaves the newest checkpoints whole, the adapters it
 * promised, no journal of a recorded step, every trajectory, and a checkpoint fallback that never picks a
 * pruned checkpoint.
 */
import { existsSync, mkdirSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { createMetricsActivities } from '../../../src/activities/metrics';
import { RunConfig } from '../../../src/config/schema';
import { crossCheck } from '../../../src/config/crossChecks';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { planFallback } from '../../../src/records/fallback';
import { planRetention, prunedCheckpoints } from '../../../src/records/retention';
import { ref } from '../../helpers/workflowFakes';

const uri = (dir: string): ArtifactRef => ({ uri: `file:///store/runs/r/checkpoints/${dir}`, sha256: dir.padEnd(64, '0'), bytes: 1 });

function record(step: number, extra: Partial<StepRecord> = {}): StepRecord {
  return {
    format: 'ratchet.step/v1', run_id: 'r', step, time: `2026-01-01T00:00:${String(step).padStart(2, '0')}Z`, policy_version: step + 1,
    mean_reward: 0, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
    mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: { loss: 1 }, timing_ms: {}, checkpoint: uri(`step-${step}-a`), ...extra,
  };
}

describe('the retention plan', () => {
  // Steps 0..9 recorded (step 4 started an eval sweep), step 10 saved but not recorded; a losing save of step 3;
  // a write in progress; every step has a trajectory and a turn journal; one eval episode has a journal.
  const ckptFiles = (dir: string) => ['MANIFEST.sha256', 'optimizer.pt', 'trainer_state.json', 'adapter/MANIFEST.sha256', 'adapter/adapter_model.safetensors']
    .map((f) => ({ key: `runs/r/checkpoints/${dir}/${f}`, bytes: f === 'optimizer.pt' ? 200 : 10 }));
  const dirs = [...Array.from({ length: 11 }, (_, s) => `step-${s}-a`), 'step-3-b.attempt-x1', 'step-11-c.tmp-99-ab'];
  const keys = [
    ...dirs.flatMap(ckptFiles),
    ...Array.from({ length: 11 }, (_, s) => [
      { key: `runs/r/steps/${s}/rollouts/g0/0-abc.json`, bytes: 50 },
      { key: `runs/r/steps/${s}/rollouts/g0/0.journal/turn-0000-a1.json`, bytes: 40 },
    ]).flat(),
    { key: 'runs/r/evals/trajectories/e0/0.journal/turn-0000-a1.json', bytes: 40 },
  ];
  const records = Array.from({ length: 10 }, (_, s) => record(s, s === 4 ? { eval_sweep: { workflow_id: 'r-eval-v5', policy_version: 5, taskset: 't', k: 1, every_steps: 5 } } : {}));
  const policy = { keep_last: 3, keep_every: 4, journals: true };
  const state = { completedStep: 9, checkpoint: uri('step-9-a') };

  test('newest keep_last whole, every keep_every-th version and eval sweeps adapter-only, the rest gone; journals of recorded steps', () => {
    const plan = planRetention({ runId: 'r', keys, records, state, policy });
    const fate = Object.fromEntries(plan.checkpoints.map((c) => [c.dir, c.keep]));
    expect(fate).toEqual({
      'step-0-a': 'none', 'step-1-a': 'none', 'step-2-a': 'none', 'step-3-a': 'adapter', 'step-4-a': 'adapter', 'step-5-a': 'none',
      'step-6-a': 'none', 'step-7-a': 'whole', 'step-8-a': 'whole', 'step-9-a': 'whole', 'step-10-a': 'whole',
      'step-3-b.attempt-x1': 'none', 'step-11-c.tmp-99-ab': 'whole',
    });
    const deleted = new Set(plan.delete.map((d) => d.key));
    // Adapter-only: the optimizer and trainer state go, the adapter stays.
    expect(deleted.has('runs/r/checkpoints/step-3-a/optimizer.pt')).toBe(true);
    expect(deleted.has('runs/r/checkpoints/step-3-a/adapter/adapter_model.safetensors')).toBe(false);
    expect(deleted.has('runs/r/checkpoints/step-0-a/adapter/adapter_model.safetensors')).toBe(true);
    // Journals: steps 0..9 (recorded), not 10; trajectories never; the eval journal only when the run is finished.
    const journals = plan.delete.filter((d) => d.key.includes('.journal/')).map((d) => d.key);
    expect(journals).toEqual(Array.from({ length: 10 }, (_, s) => `runs/r/steps/${s}/rollouts/g0/0.journal/turn-0000-a1.json`));
    expect(plan.delete.some((d) => d.key.endsWith('0-abc.json'))).toBe(false);
    // 6 whole checkpoints (steps 0, 1, 2, 5, 6 and the losing save: 5 files, 240 bytes each) + the optimizer,
    // manifest and trainer state of 2 adapter-only ones (220 each) + 10 journals of 40.
    expect(plan.bytes).toBe(6 * 240 + 2 * 220 + 10 * 40);
    const finished = planRetention({ runId: 'r', keys, records, state, policy, finished: true });
    expect(finished.delete.map((d) => d.key)).toContain('runs/r/evals/trajectories/e0/0.journal/turn-0000-a1.json');
  });

  test("the state's checkpoint stays whole even when older than the newest records (after a fallback), and journals: false keeps journals", () => {
    const plan = planRetention({ runId: 'r', keys, records, state: { completedStep: 9, checkpoint: uri('step-5-a') }, policy: { ...policy, journals: false } });
    expect(plan.checkpoints.find((c) => c.dir === 'step-5-a')?.keep).toBe('whole');
    expect(plan.delete.some((d) => d.key.includes('.journal/'))).toBe(false);
  });

  test('a lag raised mid-run (ratchet set --async-level) keeps the adapters rollouts may still use', () => {
    const raised = records.map((r) => (r.step === 9 ? { ...r, overrides: { async_level: 4 } } : r));
    const plan = planRetention({ runId: 'r', keys, records: raised, state, policy });
    expect(plan.checkpoints.filter((ck) => ck.keep === 'whole' && ck.step <= 9).map((ck) => ck.step).sort((a, b) => a - b)).toEqual([5, 6, 7, 8, 9]);
  });

  test('ratchet check: keep_last below async_level + 1 is refused naming the key and the fix', () => {
    const issues = crossCheck(RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }], orchestrator: { async_level: 2 }, artifacts: { retention: { keep_last: 2 } } }));
    expect(issues).toContainEqual({ key: 'artifacts.retention.keep_last', message: expect.stringMatching(/newest 3\. Fix: set artifacts\.retention\.keep_last to 3 or more/) });
    expect(() => RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }], artifacts: { retention: { keep_last: 1 } } })).toThrow(/keep_last/);
    expect(() => RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }], artifacts: { retention: { keep: 3 } } })).toThrow(/keep/);
  });
});

describe('retention after each recorded step, on a real store', () => {
  test('6 steps, keep_last 2, keep_every 3: what is left, and the fallback never picks a pruned checkpoint', async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'ratchet-retention-'));
    const store = new LocalArtifactStore(root);
    await store.putJson(runKeys.config('r'), RunConfig.parse({ name: 'r', env: [{ id: 'swe-grep' }], artifacts: { retention: { keep_last: 2, keep_every: 3 } } }));
    const { recordStep } = createMetricsActivities({ store, logger: pino({ level: 'silent' }) });
    let state: RunStateFile | undefined;
    for (let s = 0; s < 6; s++) {
      await store.put(runKeys.trajectory('r', s, 'g0', 0, 'ab'.repeat(32)), '{}');
      await store.put(runKeys.rolloutJournalTurn('r', s, 'g0', 0, 0, 'a1'), '{}');
      const src = mkdtempSync(path.join(tmpdir(), 'ratchet-ckpt-src-'));
      mkdirSync(path.join(src, 'adapter'));
      writeFileSync(path.join(src, 'adapter', 'adapter_model.safetensors'), Buffer.alloc(64, s + 1));
      writeFileSync(path.join(src, 'optimizer.pt'), Buffer.alloc(128, s + 1));
      writeFileSync(path.join(src, 'trainer_state.json'), JSON.stringify({ step: s }));
      const key = `runs/r/checkpoints/step-${s}-${String(s).repeat(16)}`;
      const checkpoint = await store.putDir(key, src);
      const adapter = await store.putDir(`${key}/adapter`, store.localPath(`${key}/adapter`));
      state = {
        format: 'ratchet.run-state/v1', runId: 'r', configSha256: 'x', completedStep: s, nextStep: s + 1,
        policyVersion: s + 1, configRef: ref('config'), seed: 0, checkpoint, adapter, lastMeanReward: 0,
      };
      await recordStep({ record: { ...record(s), checkpoint, adapter }, state });
    }
    const ckpts = path.join(root, 'runs', 'r', 'checkpoints');
    const contents = Object.fromEntries(readdirSync(ckpts).sort().map((d) => [d, readdirSync(path.join(ckpts, d)).sort()]));
    expect(contents).toEqual({
      // Version 3 (step 2) is a multiple of keep_every: its adapter only.
      [`step-2-${'2'.repeat(16)}`]: ['adapter'],
      [`step-4-${'4'.repeat(16)}`]: ['MANIFEST.sha256', 'adapter', 'optimizer.pt', 'trainer_state.json'],
      [`step-5-${'5'.repeat(16)}`]: ['MANIFEST.sha256', 'adapter', 'optimizer.pt', 'trainer_state.json'],
    });
    for (let s = 0; s < 6; s++) {
      expect(existsSync(store.localPath(runKeys.rolloutJournal('r', s, 'g0', 0)))).toBe(false);
      expect(existsSync(store.localPath(runKeys.trajectory('r', s, 'g0', 0, 'ab'.repeat(32))))).toBe(true);
    }
    const pruned = await prunedCheckpoints(store, 'r');
    expect(pruned.size).toBe(4); // steps 0, 1, 2 (adapter only) and 3
    // The newest checkpoint turns out corrupt: the fallback goes to step 4, whole, and names no pruned one as skipped.
    const plan = await planFallback(store, state!, 'adapter corrupt', 'restart', '2026-01-02T00:00:00Z');
    expect(plan.record.used?.step).toBe(4);
    expect(plan.record.skipped).toEqual([]);
  });
});
