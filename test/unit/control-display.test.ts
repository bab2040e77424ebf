/** Control actions as `ratchet status` and the HTML report show them (src/cli/follow.ts, src/report). */
import { StepRecord } from '../../src/contracts/records';
import { reportStep } from '../../src/report/records';
import { buildReportData } from '../../src/report/aggregate';
import { renderReportHtml } from '../../src/report/html';
import { controlLine } from '../../src/cli/follow';

const record = (step: number, extra: Record<string, unknown> = {}) => StepRecord.parse({
  format: 'ratchet.step/v1', run_id: 'r', step, time: `2026-11-25T10:0${step}:00Z`, policy_version: step + 1, mean_reward: 0.5,
  timing_ms: { step: 1000 }, ...extra,
});

const set = { action: 'set', identity: 'alice@h', reason: 'loss <spikes>', time: '2026-11-25T10:00:30.000Z', step: 0, changes: { learning_rate: 5e-6 } } as const;
const pause = { action: 'pause', identity: 'unknown', reason: '', time: '2026-11-25T10:01:30.000Z', step: 1 } as const;

test('a step record\'s control actions, build and overrides reach the report', () => {
  const steps = [record(0, { control: [set], build: { deployment: 'ratchet', build_id: 'b1' } }), record(1, { control: [pause], overrides: { learning_rate: 5e-6 } })].map(reportStep);
  expect(steps[0]!.control).toEqual([set]);
  expect(steps[0]!.build).toEqual({ deployment: 'ratchet', build_id: 'b1' });
  expect(steps[1]!.overrides).toEqual({ learning_rate: 5e-6 });
  const data = buildReportData('r', steps, []);
  expect(data.controls.map((a) => [a.action, a.recordedWith])).toEqual([['set', 0], ['pause', 1]]);
  const html = renderReportHtml(data, '');
  expect(html).toContain('id="sec-controls"');
  expect(html).toContain('alice@h');
  expect(html).toContain('loss &lt;spikes&gt;');
  expect(html).toContain('set (learning_rate = 0.000005)');
  expect(html).toContain('no reason given');
});

test('a report of a run without control actions says so', () => {
  const html = renderReportHtml(buildReportData('r', [reportStep(record(0))], []), '');
  expect(html).toContain('No control actions recorded in this run.');
});

test('`ratchet status` prints who did what and why', () => {
  expect(controlLine(set)).toMatch(/set learning_rate=0.000005.* by alice@h at step 0 \(2026-11-25T10:00:30.000Z\): loss <spikes>/);
  expect(controlLine(pause)).toMatch(/pause.* by unknown at step 1 .*no reason given/);
});
