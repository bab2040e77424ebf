/** Control actions as `ratchet status` and the HTML report show them (src/cli/follow.ts, src/report). */
import { StepRecord } from '../../../src/contracts/records';
import { reportStep } from '../../../src/report/records';
import { buildReportData } from '../../../src/report/aggregate';
import { renderReportHtml } from '../../../src/report/html';
import { controlLine } from '../../../src/cli/follow';
import { lineageText } from '../../../src/cli/lineage';
import { MAX_LINEAGE_ROWS, stepLineage } from '../../../src/workflows/lineage';
import { RunConfig } from '../../../src/config/schema';

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

test('lineage: a step\'s record prints as text, the report links each step to `ratchet lineage`', () => {
  const lineage = {
    build: { deployment: 'ratchet', build_id: 'b1' }, config_sha256: 'c'.repeat(64), model: { path: 'm', served_model: 's' },
    tasks: { task_set_dir: '/t', seed: 3, rows: [{ env: 'swe-grep', dataset: 'd.jsonl', instance_id: 'pkg-1' }] },
    envs: [{ id: 'swe-grep', rubric: { correct_files: 1 } }], sampling: { temperature: 1 }, rollout_policy_versions: { 2: 5, 1: 1 },
    batch_sha256: 'b'.repeat(64), manifest_sha256: 'm'.repeat(64),
    trainer: { seed: 0, step: 2, learning_rate: 1e-5, loss: 'grpo', parent_checkpoint_sha256: 'p'.repeat(64), adapter_sha256: 'a'.repeat(64) },
  };
  const text = lineageText(2, lineage);
  for (const want of ['ratchet.b1', 'c'.repeat(64), 'pkg-1', '"correct_files":1', '{"1":1,"2":5}', 'b'.repeat(64), '"adapter_sha256":"' + 'a'.repeat(64)]) expect(text).toContain(want);
  expect(lineageText(0, undefined)).toMatch(/no lineage recorded/);
  const html = renderReportHtml(buildReportData('r', [reportStep(record(2, { lineage }))], []), '');
  expect(html).toContain('ratchet lineage r 2');
  expect(html).toContain('b'.repeat(12));
});

test('lineage names at most 256 task rows (it travels through history), and counts them all', () => {
  const config = RunConfig.parse({ name: 'x', env: [{ id: 'swe-grep' }] });
  const tasks = Array.from({ length: 300 }, (_, i) => ({ envId: 'swe-grep', groupId: `g${i}`, datasetPath: 'd', instanceId: `t${i}`, envIndex: 0 }));
  const l = stepLineage({ config, configSha256: 'c', seed: 1, step: 0, taskSetDir: '/t', tasks, versionBefore: 3, stalenessHistogram: { 0: 4, 1: 2 }, trained: false });
  expect(l.tasks.row_count).toBe(300);
  expect(l.tasks.rows).toHaveLength(MAX_LINEAGE_ROWS);
  expect(l.rollout_policy_versions).toEqual({ 3: 4, 2: 2 });
  expect(l.trainer.adapter_sha256).toBeUndefined();
});
