/** recordStep: one line per completed step, whatever crashed between the record and the state file. */
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { createMetricsActivities, readStepRecords } from '../../src/activities/metrics';
import type { RunStateFile, StepRecord } from '../../src/contracts';
import { ref } from './workflowFakes';

function record(step: number, batch: string | undefined, meanReward: number): StepRecord {
  return {
    format: 'ratchet.step/v1', run_id: 'r', step, time: '2026-01-01T00:00:00Z', policy_version: step + 1,
    mean_reward: meanReward, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
    mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: {}, timing_ms: {},
    batch: batch ? { batch: ref(batch), manifest: ref(`m-${batch}`), summary: {} } : undefined,
  };
}

const state = (completedStep: number): RunStateFile => ({
  format: 'ratchet.run-state/v1', runId: 'r', configSha256: 'x', completedStep, nextStep: completedStep + 1,
  policyVersion: completedStep + 1, configRef: ref('config'), seed: 0,
});

describe('recordStep', () => {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-metrics-'));
  const store = new LocalArtifactStore(root);
  const { recordStep } = createMetricsActivities({ store, logger: pino({ level: 'silent' }) });
  const file = path.join(root, 'runs', 'r', 'metrics.jsonl');

  it('a retried call with the same batch leaves one line; a redone step (another batch) replaces the earlier attempt', async () => {
    await recordStep({ record: record(0, 'b0', 0.1), state: state(0) });
    await recordStep({ record: record(1, 'b1-first', 0.2), state: state(1) });
    await recordStep({ record: record(1, 'b1-first', 0.2), state: state(1) });
    expect(readFileSync(file, 'utf8').trim().split('\n')).toHaveLength(2);
    // The crash came after the first attempt's record and before its state: step 1 is redone on another batch.
    await recordStep({ record: record(1, 'b1-redone', 0.7), state: state(1) });
    const records = await readStepRecords(store, 'r');
    expect(records.map((r) => [r.step, r.mean_reward])).toEqual([[0, 0.1], [1, 0.7]]);
    expect(JSON.parse(readFileSync(path.join(root, 'runs', 'r', 'state.json'), 'utf8')).completedStep).toBe(1);
  });
});
