/**
 * The run report (src/report): its data, the step records it reads, and its HTML.
 *
 * The "control actions and lineage as `ratchet status` and the report show them" block:
 * Control actions as `ratchet status` and the HTML report show them (src/cli/follow.ts, src/report).
 */
import { buildReportData } from '../../../src/report/aggregate';
import { renderReportHtml } from '../../../src/report/html';
import { parseStepRecords, RunDataError } from '../../../src/report/load';
import { reportStep } from '../../../src/report/records';
import { zeroCost } from '../../../src/shared/cost';
import { syntheticEvalResults, syntheticReportSteps, syntheticStepRecords } from '../../../src/report/synthetic';
import { StepRecord } from '../../../src/contracts/records';
import { controlLine } from '../../../src/cli/follow';
import { lineageText } from '../../../src/cli/lineage';
import { MAX_LINEAGE_ROWS, stepLineage } from '../../../src/workflows/lineage';
import { RunConfig } from '../../../src/config/schema';

describe('report data', () => {
  const records = syntheticReportSteps(10);
  it('sums phases into shares that add to 1', () => {
    const d = buildReportData('r', records, []);
    expect(d.phases.map((p) => p.phase)).toEqual(['rollout', 'scoring', 'batch', 'train', 'sync']);
    expect(d.phases.reduce((s, p) => s + p.share, 0)).toBeCloseTo(1, 3);
    expect(d.steps).toHaveLength(10);
    expect(d.tools[0]![0]).toBe('bash');
  });
  it('computes episodes per hour from step wall time', () => {
    const r = { ...records[0]!, episodes: 10, started_at: '2025-01-01T00:00:00Z', finished_at: '2025-01-01T00:06:00Z' };
    expect(buildReportData('r', [r], []).throughput.episodesPerHour[0]).toBe(100);
  });
  it('aligns a baseline run by step number, null where it has no such step', () => {
    const mine = syntheticReportSteps(4);
    const theirs = syntheticReportSteps(6).filter((r) => r.step !== 2).map((r) => ({ ...r, reward: { ...r.reward, mean: 10 + r.step } }));
    const d = buildReportData('r', mine, [], new Date(), { runId: 'control', records: [...theirs].reverse() });
    expect(d.baseline).toEqual({ runId: 'control', mean: [10, 11, null, 13] });
    expect(buildReportData('r', mine, []).baseline).toBeUndefined();
    const html = renderReportHtml(d, '');
    expect(html).toContain('mean reward of run control at the same steps');
    expect(renderReportHtml(buildReportData('r', mine, []), '')).not.toContain('at the same steps');
  });
  it('groups evals by task set across versions', () => {
    const d = buildReportData('r', records, syntheticEvalResults('r', [5, 0, 10]));
    expect(d.evals).toHaveLength(1);
    expect(d.evals[0]!.versions).toEqual([0, 5, 10]);
  });
});

describe('parseStepRecords', () => {
  it('keeps the last record of a step written twice and sorts', () => {
    const [a, b] = syntheticStepRecords(2);
    const text = [b, a, { ...a!, mean_reward: 42 }].map((r) => JSON.stringify(r)).join('\n');
    const got = parseStepRecords(text, 'm.jsonl');
    expect(got.map((r) => r.step)).toEqual([0, 1]);
    expect(got[0]!.reward.mean).toBe(42);
  });
  it('reads a synthetic run\'s StepRecord lines as the report\'s steps', () => {
    const text = syntheticStepRecords(3).map((r) => JSON.stringify(r)).join('\n');
    expect(parseStepRecords(text, 'm.jsonl')).toEqual(syntheticReportSteps(3));
  });
  it('still reads older lines of the report\'s own shape (no format)', () => {
    const [a, b] = syntheticReportSteps(2);
    const text = [b, a, { ...a!, reward: { ...a!.reward, mean: 42 } }].map((r) => JSON.stringify(r)).join('\n');
    const got = parseStepRecords(text, 'm.jsonl');
    expect(got.map((r) => r.step)).toEqual([0, 1]);
    expect(got[0]!.reward.mean).toBe(42);
    expect(got[1]!.phase_ms).toEqual(b!.phase_ms);
  });
  it('names the field of a bad StepRecord line', () => {
    const [a] = syntheticStepRecords(1);
    expect(() => parseStepRecords(JSON.stringify({ ...a!, policy_version: -1 }), 'm.jsonl')).toThrow(/m\.jsonl:1.*policy_version/s);
    expect(reportStep(a!).reward.min).toBe(a!.reward_min);
  });
  it('names file, line and field of a bad record', () => {
    expect(() => parseStepRecords('{"step": 0}\n', 'runs/x/metrics.jsonl')).toThrow(/metrics\.jsonl:1.*policy_version/s);
    expect(() => parseStepRecords('{oops\n', 'm.jsonl')).toThrow(RunDataError);
  });
  it("accepts TrainRun's ratchet.step/v1 lines, each phase counted once", () => {
    // The keys TrainRun writes (src/workflows/trainRun.ts): rollouts overlaps the previous step,
    // rollouts_waited is this step's wait; weight_sync_activity is inside weight_sync.
    const timing_ms = { step: 8000, rollouts: 9000, rollouts_waited: 4000, build_batch: 500, train_and_save: 3000, weight_sync: 500, weight_sync_activity: 400 };
    const line = {
      format: 'ratchet.step/v1', run_id: 'r', step: 3, time: '2025-01-01T00:10:00.000Z', policy_version: 4, mean_reward: 0.5, reward_std: 0.1,
      reward_components: { correct_files: 0.7 }, rollouts: 8, samples: 8, dropped: {}, stop_reasons: {}, mean_staleness: 0,
      completion_tokens: 900, prompt_tokens: 100, tool_calls: 12, trainer: {}, timing_ms, batch: null,
      tool_calls_by_tool: { bash: 10, result: 2 }, shell_commands: { rg: 6, cat: 4 }, staleness_histogram: { 0: 6, 1: 2 },
    };
    const [r] = parseStepRecords(JSON.stringify(line), 'm.jsonl');
    expect(r!.reward).toEqual({ mean: 0.5, std: 0.1, min: 0.5, max: 0.5 });
    expect(r!.phase_ms).toEqual({ rollout: 4000, scoring: 0, batch: 500, train: 3000, sync: 500 });
    expect(Object.values(r!.phase_ms).reduce((a, b) => a + b, 0)).toBe(timing_ms.step);
    expect(r!.started_at).toBe('2025-01-01T00:09:52.000Z');
    expect(r!.tokens).toBe(1000);
    expect(r!.tool_calls).toEqual({ bash: 10, result: 2 });
    expect(r!.shell_commands).toEqual({ rg: 6, cat: 4 });
    expect(r!.staleness).toEqual({ 0: 6, 1: 2 });
  });
  it('an older TrainRun line without per-tool counts still reads, as one bar', () => {
    const line = {
      format: 'ratchet.step/v1', run_id: 'r', step: 0, time: '2025-01-01T00:10:00.000Z', policy_version: 1, mean_reward: 0, reward_std: 0,
      reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {}, mean_staleness: 0,
      completion_tokens: 10, tool_calls: 3, trainer: {}, timing_ms: { step: 1000, rollouts_waited: 1000 }, batch: null,
    };
    expect(parseStepRecords(JSON.stringify(line), 'm.jsonl')[0]!.tool_calls).toEqual({ 'all tools': 3 });
  });
});

describe('renderReportHtml', () => {
  it('is one self-contained file: no external src/href, the library and data inlined', () => {
    const html = renderReportHtml(buildReportData('r<1>', syntheticReportSteps(5), []), '/* chart lib */');
    expect(html).not.toMatch(/<script[^>]+src=/);
    expect(html).not.toMatch(/<link[^>]+href=/);
    expect(html).toContain('/* chart lib */');
    expect(html).toContain('r&lt;1&gt;');
    expect(html).toContain('No eval results yet');
    // The inlined JSON cannot close its script tag early.
    const data = html.slice(html.indexOf('id="ratchet-data">'));
    expect(data.slice(0, data.indexOf('</script>'))).not.toContain('<1>');
  });

  it('charts the train/inference mismatch from the trainer metrics in the step records', () => {
    const records = syntheticReportSteps(3).map((r, i) => ({
      ...r, trainer: { mismatch_abs_mean: 0.001 * (i + 1), mismatch_abs_max: 0.05, mismatch_masked_frac: 0, mismatch_capped_frac: 0.01 * i },
    }));
    const data = buildReportData('r', records, []);
    expect(data.mismatch.absMean).toEqual([0.001, 0.002, 0.003]);
    expect(data.mismatch.cappedFrac).toEqual([0, 0.01, 0.02]);
    expect(renderReportHtml(data, '')).toContain('id="chart-mismatch"');
    const without = buildReportData('r', syntheticReportSteps(2), []);
    expect(without.mismatch.absMean).toEqual([null, null]);
    expect(renderReportHtml(without, '')).toContain('No trainer mismatch metrics recorded');
  });

  it('tables and plots what the run cost, summed from the step records\' own figures', () => {
    const cost = (i: number) => ({ ...zeroCost(), sandbox_containers: 4, sandbox_container_s: 10 + i, sandbox_cpu_s: 2.5 * i, trainer_cpu_s: 30, tokens_generated: 100 * (i + 1) });
    // Step 0 from before the ledger: no cost, left out of the sums and a gap in the plot.
    const records = syntheticReportSteps(4).map((r, i) => (i === 0 ? r : { ...r, cost: cost(i) }));
    const data = buildReportData('r', records, []);
    const row = (k: string) => data.cost!.rows.find((x) => x.key === k)!;
    expect(data.cost!.steps).toBe(3);
    expect(row('sandbox_container_s')).toEqual({ key: 'sandbox_container_s', total: 11 + 12 + 13, meanPerStep: 12, last: 13 });
    expect(row('tokens_generated').total).toBe(200 + 300 + 400);
    expect(data.cost!.perStep.sandbox_cpu_s).toEqual([null, 2.5, 5, 7.5]);
    const html = renderReportHtml(data, '');
    expect(html).toContain('id="chart-cost"');
    expect(html).toContain('sandbox container-seconds');
    const none = buildReportData('r', syntheticReportSteps(2), []);
    expect(none.cost).toBeNull();
    expect(renderReportHtml(none, '')).toContain('No cost recorded in this run');
  });
});

describe('control actions and lineage as `ratchet status` and the report show them', () => {
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
});
