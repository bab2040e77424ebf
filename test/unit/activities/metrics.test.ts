/**
 * recordStep appends: one object per step record and per run state, created once, never rewritten;
 * a stale attempt cannot roll the state back or replace a newer record; a run from before 0.6
 * (metrics.jsonl + state.json) still reads.
 */
import { mkdtempSync, readFileSync, statSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createMetricsActivities, readStepRecords } from '../../../src/activities/metrics';
import type { FallbackRecord, RunStateFile, StepRecord } from '../../../src/contracts';
import { readRunRecords, readRunState } from '../../../src/records/runRecords';
import { winningState, winningSteps } from '../../../src/records/winners';
import { ref } from '../../helpers/workflowFakes';

function record(step: number, batch: string | undefined, meanReward: number, time = '2026-01-01T00:00:00Z', epoch?: number): StepRecord {
  return {
    format: 'ratchet.step/v1', run_id: 'r', step, time, policy_version: step + 1,
    mean_reward: meanReward, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
    mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: {}, timing_ms: {},
    batch: batch ? { batch: ref(batch), manifest: ref(`m-${batch}`), summary: {} } : undefined,
    ...(epoch ? { epoch } : {}),
  };
}

const state = (completedStep: number, epoch?: number): RunStateFile => ({
  format: 'ratchet.run-state/v1', runId: 'r', configSha256: 'x', completedStep, nextStep: completedStep + 1,
  policyVersion: completedStep + 1, configRef: ref('config'), seed: 0, ...(epoch ? { epoch } : {}),
});

function setup() {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-metrics-'));
  const store = new LocalArtifactStore(root);
  const { recordStep } = createMetricsActivities({ store, logger: pino({ level: 'silent' }) });
  return { root, store, recordStep };
}

describe('recordStep', () => {
  it('appends one object per record: the count grows, earlier objects stay byte for byte; a retry adds nothing', async () => {
    const { store, recordStep } = setup();
    await recordStep({ record: record(0, 'b0', 0.1), state: state(0) });
    const first = await store.list('runs/r/records/steps');
    expect(first).toHaveLength(1);
    const bytes = readFileSync(store.localPath(first[0]!));
    const mtime = statSync(store.localPath(first[0]!)).mtimeMs;
    await recordStep({ record: record(1, 'b1', 0.2), state: state(1) });
    await recordStep({ record: record(1, 'b1', 0.2), state: state(1) });
    const after = await store.list('runs/r/records/steps');
    expect(after).toHaveLength(2);
    expect(after).toContain(first[0]);
    expect(readFileSync(store.localPath(first[0]!))).toEqual(bytes);
    expect(statSync(store.localPath(first[0]!)).mtimeMs).toBe(mtime);
    expect(await store.list('runs/r/records/states')).toHaveLength(2);
    // Nothing is read-modified-written any more: no metrics.jsonl is kept.
    expect(await store.read('runs/r/metrics.jsonl')).toBeUndefined();
  });

  it('a stale attempt of an older step, finishing late, cannot roll the state back or replace the newer record', async () => {
    const { root, store, recordStep } = setup();
    await recordStep({ record: record(0, 'b0', 0.1), state: state(0) });
    await recordStep({ record: record(1, 'b1', 0.2, '2026-01-01T00:01:00Z'), state: state(1) });
    await recordStep({ record: record(2, 'b2', 0.3, '2026-01-01T00:02:00Z'), state: state(2) });
    // Step 1's first attempt, cut off from Temporal, completes after step 2 was recorded.
    await recordStep({ record: record(1, 'b1', 0.2, '2026-01-01T00:01:00Z'), state: state(1) });
    expect((await readRunState(store, 'r'))!.completedStep).toBe(2);
    expect(JSON.parse(readFileSync(path.join(root, 'runs', 'r', 'state.json'), 'utf8')).completedStep).toBe(2);
    expect((await readStepRecords(store, 'r')).map((r) => [r.step, r.mean_reward])).toEqual([[0, 0.1], [1, 0.2], [2, 0.3]]);
  });

  it('a step redone after a crash (another batch, later) wins over the earlier attempt, which stays on record', async () => {
    const { store, recordStep } = setup();
    await recordStep({ record: record(0, 'b0', 0.1), state: state(0) });
    await recordStep({ record: record(1, 'b1-first', 0.2, '2026-01-01T00:01:00Z'), state: state(1) });
    await recordStep({ record: record(1, 'b1-redone', 0.7, '2026-01-01T00:05:00Z'), state: state(1) });
    expect((await readStepRecords(store, 'r')).map((r) => [r.step, r.mean_reward])).toEqual([[0, 0.1], [1, 0.7]]);
    expect((await readRunRecords(store, 'r')).all).toHaveLength(3);
  });

  it('a run written before 0.6 (metrics.jsonl + state.json) still reads, and 0.6 records of later steps join it', async () => {
    const { root, store, recordStep } = setup();
    mkdirSync(path.join(root, 'runs', 'r'), { recursive: true });
    writeFileSync(path.join(root, 'runs', 'r', 'metrics.jsonl'), [record(0, 'b0', 0.1), record(1, 'b1', 0.2)].map((r) => JSON.stringify(r)).join('\n') + '\n');
    writeFileSync(path.join(root, 'runs', 'r', 'state.json'), JSON.stringify(state(1)));
    expect((await readStepRecords(store, 'r')).map((r) => r.step)).toEqual([0, 1]);
    expect((await readRunState(store, 'r'))!.nextStep).toBe(2);
    await recordStep({ record: record(2, 'b2', 0.3, '2026-01-01T00:02:00Z'), state: state(2) });
    expect((await readStepRecords(store, 'r')).map((r) => r.step)).toEqual([0, 1, 2]);
    expect((await readRunState(store, 'r'))!.completedStep).toBe(2);
  });
});

describe('winners', () => {
  const fallback = (epoch: number, usedStep: number | undefined): FallbackRecord => ({
    format: 'ratchet.checkpoint-fallback/v1', run_id: 'r', epoch, time: '2026-01-01T00:03:00Z', by: 'restart',
    bad: { step: 2, error: 'corrupt' }, skipped: [], retrained_steps: [],
    ...(usedStep === undefined ? {} : { used: { checkpoint: ref('c'), step: usedStep, policy_version: usedStep + 1 } }),
  });

  it('a fallback voids the records after its used step from earlier epochs; the retrained record wins', () => {
    const records = [record(0, 'a', 0), record(1, 'b', 1), record(2, 'c', 2), record(1, 'b2', 11, '2026-01-01T00:04:00Z', 1)];
    // Step 2 was voided and not yet retrained: it has no winner.
    expect(winningSteps(records, [fallback(1, 0)]).map((r) => [r.step, r.mean_reward])).toEqual([[0, 0], [1, 11]]);
    // No checkpoint verified: every step is retrained.
    expect(winningSteps([record(0, 'a', 0)], [fallback(1, undefined)])).toEqual([]);
  });

  it('the state of a higher epoch wins over any state of a lower one; then the higher completed step', () => {
    expect(winningState([state(2), state(0, 1), state(1)])!.epoch).toBe(1);
    expect(winningState([state(1, 1), state(2), state(0, 1)])!.completedStep).toBe(1);
    expect(winningState([state(1), state(3), state(2)])!.completedStep).toBe(3);
    expect(winningState([])).toBeUndefined();
  });
});
