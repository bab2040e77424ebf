/**
 * Informative groups and the sampling policy version, from a step's rollout summaries to its record,
 * `ratchet status`'s step line and the report. The expected counts are worked out by hand per group.
 */
import { rolloutStats } from '../../../src/rollouts/stats';
import { stepRecord, type FinishedStep } from '../../../src/workflows/stepRecord';
import { StepRecord } from '../../../src/contracts/records';
import { reportStep } from '../../../src/report/records';
import { stepLine } from '../../../src/cli/follow';
import { buildReportData } from '../../../src/report/aggregate';
import { renderReportHtml } from '../../../src/report/html';
import type { RolloutSummary } from '../../../src/contracts/trajectory';

const summary = (group: string, i: number, reward: number, stop: RolloutSummary['stop_reason'] = 'completed'): RolloutSummary => ({
  task_id: group, group_id: group, rollout_index: i, trajectory: { uri: `file:///${group}/${i}`, sha256: 'x', bytes: 1 },
  reward, components: {}, stop_reason: stop, policy_version: 2, completion_tokens: 1, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
});

// g0: 1 vs 0, informative. g1: all 0, uniform. g2: 1 and 0, but the 0 hit max_turns: informative when scored,
// uniform (one member) when limit-ended episodes are masked. g3: 0.5 and an infra_error (never a baseline member).
const rollouts = [
  summary('g0', 0, 1), summary('g0', 1, 0),
  summary('g1', 0, 0), summary('g1', 1, 0),
  summary('g2', 0, 1), summary('g2', 1, 0, 'max_turns'),
  summary('g3', 0, 0.5), summary('g3', 1, -1, 'infra_error'),
];

function finished(stats: FinishedStep['stats'], extra: Partial<FinishedStep> = {}): FinishedStep {
  return {
    runId: 'r', step: 4, versionBefore: 3, policyVersion: 4, stats,
    times: { start: 0, rolloutsStarted: 0, rollouts: 10, batch: 20, train: 30, sync: 40 }, ...extra,
  };
}

describe('informative groups per step', () => {
  test('rolloutStats counts groups and informative groups, with limit-ended episodes in or out of the baseline', () => {
    expect(rolloutStats(rollouts, 3)).toMatchObject({ groups: 4, informativeGroups: 2 });
    expect(rolloutStats(rollouts, 3, 'score')).toMatchObject({ groups: 4, informativeGroups: 2 });
    expect(rolloutStats(rollouts, 3, 'mask')).toMatchObject({ groups: 4, informativeGroups: 1 });
  });

  test('the step record carries them, the sampling policy version and the refill rounds, and reads back', () => {
    const stats = { ...rolloutStats(rollouts, 3), rollouts: rollouts.length };
    const refill = { target: 4, rounds: [{ round: 0, groups: 4, informative_groups: 2, policy_version: 2 }, { round: 1, groups: 2, informative_groups: 1, policy_version: 3 }] };
    const rec = stepRecord(finished(stats, { samplingPolicyVersion: 2, refill }));
    expect(rec).toMatchObject({ groups: 4, informative_groups: 2, sampling_policy_version: 2, refill });
    expect(StepRecord.parse(JSON.parse(JSON.stringify(rec)))).toMatchObject({ informative_groups: 2, sampling_policy_version: 2, refill });
    // A record from before them reads, and says nothing about them.
    const older = stepRecord(finished({ ...stats, groups: undefined, informativeGroups: undefined }));
    expect(older).not.toHaveProperty('informative_groups');
    expect(older).not.toHaveProperty('sampling_policy_version');
  });

  test('ratchet status shows informative groups per step, the refill rounds and the version that sampled it', () => {
    const stats = { ...rolloutStats(rollouts, 3), rollouts: rollouts.length };
    const refill = { target: 4, rounds: [{ round: 0, groups: 4, informative_groups: 2, policy_version: 2 }, { round: 1, groups: 2, informative_groups: 1, policy_version: 3 }] };
    const line = stepLine(reportStep(StepRecord.parse(stepRecord(finished(stats, { samplingPolicyVersion: 2, refill })))));
    expect(line).toContain('2/4 informative groups in 2 rounds · sampled by v2');
    const plain = stepLine(reportStep(StepRecord.parse(stepRecord(finished({ ...stats, groups: undefined, informativeGroups: undefined })))));
    expect(plain).not.toContain('informative');
  });

  test('the report has a table of them per step', () => {
    const stats = { ...rolloutStats(rollouts, 3, 'mask'), rollouts: rollouts.length };
    const steps = [reportStep(StepRecord.parse(stepRecord(finished(stats, { samplingPolicyVersion: 2 }))))];
    const data = buildReportData('r', steps, []);
    expect(data.signal).toEqual([{ step: 4, groups: 4, informative: 1, refillRounds: 0, sampledBy: 2 }]);
    const html = renderReportHtml(data, '');
    expect(html).toContain('Learning signal per step');
    expect(html).toMatch(/<td class="num">4<\/td><td class="num">v2<\/td><td class="num">4<\/td><td class="num">1<\/td><td class="num">0<\/td>/);
  });
});
