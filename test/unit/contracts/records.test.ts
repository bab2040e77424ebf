/** The stored contracts: what the workflow writes is what the one schema reads back, unchanged. */
import { RunStateFile, StepRecord, type LoadedConfig } from '../../../src/contracts';
import { rolloutStats } from '../../../src/rollouts/stats';
import { reportStep } from '../../../src/report/records';
import { runStateAfter, stepRecord, type FinishedStep } from '../../../src/workflows/stepRecord';
import { ref } from '../../helpers/workflowFakes';

const roundTrip = (x: unknown): unknown => JSON.parse(JSON.stringify(x));

function finished(trained: boolean): FinishedStep {
  const summary = {
    task_id: 't', group_id: 'g', rollout_index: 0, stop_reason: 'completed' as const, reward: 0.5, components: { correct_files: 1 },
    policy_version: 2, completion_tokens: 40, prompt_tokens: 100, tool_calls: 3, model_ms: 10, tools_ms: 5, sandbox_ms: 1,
    trajectory: ref('traj'), tools_used: { bash: 3 }, commands: { rg: 2, cat: 1 },
  };
  return {
    runId: 'r', step: 3, versionBefore: 3, policyVersion: trained ? 4 : 3,
    stats: { ...rolloutStats([summary, { ...summary, rollout_index: 1, reward: -0.5 }], 3), rollouts: 2 },
    built: trained ? { batch: ref('b'), manifest: ref('m'), summary: { samples: 2, dropped: { stale: 0 } } } : undefined,
    trained: trained ? { metrics: { loss: 0.1, applied: true }, saved: { checkpoint: ref('c'), adapter: ref('a'), policy_version: 4 }, restarts: 0 } : undefined,
    synced: trained ? { ms: 12 } : undefined,
    error: trained ? undefined : { type: 'EmptyBatch', message: 'no trainable token' },
    checkpoint: trained ? ref('c') : undefined,
    adapter: trained ? ref('a') : undefined,
    times: { start: Date.UTC(2026, 0, 1), rolloutsStarted: Date.UTC(2026, 0, 1), rollouts: Date.UTC(2026, 0, 1, 0, 1), batch: Date.UTC(2026, 0, 1, 0, 1, 5),
      train: Date.UTC(2026, 0, 1, 0, 2), sync: Date.UTC(2026, 0, 1, 0, 2, 3) },
  };
}

describe('StepRecord', () => {
  it.each([true, false])('reads back what TrainRun writes, unchanged (trained: %s)', (trained) => {
    const line = roundTrip(stepRecord(finished(trained)));
    expect(StepRecord.parse(line)).toEqual(line);
  });
  it('is what the report plots, each phase once', () => {
    const r = reportStep(StepRecord.parse(roundTrip(stepRecord(finished(true)))));
    expect(r.reward).toEqual({ mean: 0, std: 0.5, min: 0, max: 0 });
    expect(r.tokens).toBe(280);
    expect(r.tool_calls).toEqual({ bash: 6 });
    expect(Object.values(r.phase_ms).reduce((a, b) => a + b, 0)).toBe(123_000);
    expect(r.started_at).toBe('2026-01-01T00:00:00.000Z');
  });
});

describe('RunStateFile', () => {
  it('reads back the state file written after a step', () => {
    const loaded = { runId: 'r', configRef: ref('config'), configSha256: 'abc' } as LoadedConfig;
    const state = roundTrip(runStateAfter(stepRecord(finished(true)), loaded, 7, { url: 's3://bucket/prefix' }));
    expect(RunStateFile.parse(state)).toEqual(state);
    expect(RunStateFile.parse(state)).toMatchObject({ completedStep: 3, nextStep: 4, policyVersion: 4, seed: 7 });
  });
});
