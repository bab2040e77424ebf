/**
 * The in-run eval cadence outside the workflow (issue 30): when a step is due, the [eval] section at run
 * start, `ratchet set --eval-every` in the CLI, and how `ratchet status` and the report show the sweeps.
 * The workflow itself (sweeps started, abandoned, below training; set mid-run) is in workflowControl.test.ts.
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { main } from '../../../src/cli/index';
import { EXIT } from '../../../src/cli/exit';
import { settingsChangeOf } from '../../../src/cli/set';
import { callerIdentity } from '../../../src/cli/control';
import { evalSweepLine, lastEvalLine, latestEvalLine } from '../../../src/cli/follow';
import { createConfigActivities } from '../../../src/activities/config';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { componentLogger } from '../../../src/shared/logger';
import { REPO_ROOT } from '../../../src/shared/paths';
import { configTaskset } from '../../../src/evals/tasksets';
import { evalDue, evalSettingsOf, evalSweepId, sweepInput, plannedSweep } from '../../../src/workflows/evalCadence';
import { RunConfig } from '../../../src/config/schema';
import { StepRecord } from '../../../src/contracts/records';
import { EvalResult } from '../../../src/contracts/eval';
import { reportStep } from '../../../src/report/records';
import { buildReportData } from '../../../src/report/aggregate';
import { renderReportHtml } from '../../../src/report/html';

const strip = (s: string): string => s.replace(/\x1b\[[0-9;]*m/g, '');

describe('when a sweep is due', () => {
  test('every N: after the N-th, 2N-th... finished step (0-based steps N-1, 2N-1...); 0 never', () => {
    // An independent count: the sweep follows the step that makes the number of finished steps a multiple of N.
    for (const every of [1, 2, 3, 5]) {
      const due = Array.from({ length: 12 }, (_, s) => s).filter((s) => evalDue(s, every));
      const expected = Array.from({ length: 12 }, (_, i) => i + 1).filter((finished) => finished % every === 0).map((f) => f - 1);
      expect(due).toEqual(expected);
    }
    expect(evalDue(1, 2)).toBe(true);
    expect(evalDue(3, 2)).toBe(true);
    expect(evalDue(0, 2)).toBe(false);
    expect([0, 1, 2, 3, 100].some((s) => evalDue(s, 0))).toBe(false);
  });

  test('the sweep id is one per step, and per checkpoint epoch; a retrained version is evaluated again', () => {
    expect(evalSweepId('r', 3)).toBe('r-step-3-eval');
    expect(evalSweepId('r', 3, 1)).toBe('r-step-3-eval-e1');
    const config = RunConfig.parse({ env: [{ id: 'swe-grep' }], eval: { every_steps: 2, taskset: 'heldout', k: 3, max_concurrent: 6 } });
    const sweep = plannedSweep('r', 3, 4, 2, config);
    expect(sweep).toEqual({ workflow_id: 'r-step-3-eval', policy_version: 4, taskset: 'heldout', k: 3, every_steps: 2 });
    expect(sweepInput('r', sweep, config, undefined)).toEqual({ runId: 'r', versions: [4], taskset: 'heldout', k: 3, maxConcurrent: 6 });
    expect(sweepInput('r', sweep, config, undefined, 1)).toMatchObject({ force: true });
  });

  test('a config stored before [eval] existed (no section at all) has the cadence off', () => {
    const stored = RunConfig.parse({ env: [{ id: 'swe-grep' }] }) as Partial<RunConfig>;
    delete stored.eval;
    expect(evalSettingsOf(stored as RunConfig)).toEqual({ every_steps: 0, taskset: 'heldout', k: 4, max_concurrent: 4 });
    expect(RunConfig.parse({ env: [{ id: 'swe-grep' }] }).eval).toEqual({ every_steps: 0, taskset: 'heldout', k: 4, max_concurrent: 4 });
  });
});

describe('[eval] at run start (openRun)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-evalcfg-'));
  mkdirSync(path.join(dir, 'repos', 'calc.git'), { recursive: true });
  const task = (id: string) => ({
    instance_id: id, repo: 'example/calc', base_commit: 'abc123', problem_statement: 'add() subtracts.',
    patch: 'diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -1 +1 @@\n-a - b\n+a + b\n',
    FAIL_TO_PASS: ['tests/test_ops.py::test_add'], source: { type: 'snapshot', repo_path: 'repos/calc.git' },
  });
  const heldout = path.join(dir, 'heldout.jsonl');
  writeFileSync(heldout, `${[task('calc-1'), task('calc-2')].map((t) => JSON.stringify(t)).join('\n')}\n`);
  const configFile = (evalToml: string) => {
    const f = path.join(dir, `c-${Math.random().toString(36).slice(2)}.toml`);
    writeFileSync(f, `[[env]]\nid = "swe-grep"\n[inference]\nbase_urls = ["http://vllm:8000/v1"]\n[eval]\n${evalToml}\n`);
    return f;
  };
  const acts = () => createConfigActivities({ store: new LocalArtifactStore(mkdtempSync(path.join(tmpdir(), 'ratchet-art-'))), logger: componentLogger('test') });

  test('a cadence on a task set that does not exist fails the run before any step, non-retryably, naming eval.taskset', async () => {
    const missing = path.join(dir, 'nope.jsonl');
    await expect(acts().openRun({ configPath: configFile(`every_steps = 2\ntaskset = "${missing}"`), runId: 'e1' })).rejects.toMatchObject({
      type: 'ConfigError', nonRetryable: true, message: expect.stringMatching(/eval\.taskset: task set ".*nope\.jsonl" not found/),
    });
  });

  test('a good task set opens the run; its path is stored absolute; a cadence of 0 checks nothing', async () => {
    const opened = await acts().openRun({ configPath: configFile(`every_steps = 2\ntaskset = "${heldout}"\nk = 2`), runId: 'e2' });
    expect(opened.loaded.config.eval).toEqual({ every_steps: 2, taskset: heldout, k: 2, max_concurrent: 4 });
    await expect(acts().openRun({ configPath: configFile('every_steps = 0\ntaskset = "/nope/nope.jsonl"'), runId: 'e3' })).resolves.toHaveProperty('loaded.runId', 'e3');
    // Names stay names (the task dir); relative paths resolve against the repository, as config paths do.
    expect(configTaskset('heldout')).toBe('heldout');
    expect(configTaskset('data/held.jsonl')).toBe(path.join(REPO_ROOT, 'data/held.jsonl'));
  });

  test('a negative or fractional every_steps is refused naming the key', async () => {
    for (const bad of ['-1', '1.5']) {
      await expect(acts().openRun({ configPath: configFile(`every_steps = ${bad}`), runId: 'e4' })).rejects.toMatchObject({
        type: 'ConfigError', message: expect.stringMatching(/: eval\.every_steps: /),
      });
    }
  });
});

describe('ratchet set --eval-every (CLI)', () => {
  let out: string[];
  let err: string[];
  beforeEach(() => {
    out = []; err = [];
    jest.spyOn(process.stdout, 'write').mockImplementation((s) => { out.push(String(s)); return true; });
    jest.spyOn(process.stderr, 'write').mockImplementation((s) => { err.push(String(s)); return true; });
    jest.spyOn(console, 'log').mockImplementation((...a) => { out.push(a.join(' ')); });
    jest.spyOn(console, 'error').mockImplementation((...a) => { err.push(a.join(' ')); });
    process.exitCode = undefined;
  });
  afterEach(() => { jest.restoreAllMocks(); process.exitCode = undefined; });

  test('builds the setSettings update with the caller\'s identity and reason', () => {
    expect(settingsChangeOf({ evalEvery: 5, reason: 'watch pass@1' })).toEqual({ identity: callerIdentity(), reason: 'watch pass@1', eval_every_steps: 5 });
    expect(settingsChangeOf({ evalEvery: 0, lr: 1e-6, reason: 'r' })).toEqual({ identity: callerIdentity(), reason: 'r', learning_rate: 1e-6, eval_every_steps: 0 });
  });

  test('a negative, fractional or non-numeric cadence is refused before anything is sent (exit 2), naming the field', async () => {
    // No Temporal at this address: a refusal that came after connecting would be a different error.
    const g = ['--address', '127.0.0.1:1'];
    expect(await main([...g, 'set', 'r1', '--eval-every', '-1', '--reason', 'x'])).toBe(EXIT.usage);
    expect(strip(err.join(''))).toMatch(/eval_every_steps must be a whole number of steps from 0 \(off\) to 1000000 \(got -1\)/);
    err = [];
    expect(await main([...g, 'set', 'r1', '--eval-every', '2.5', '--reason', 'x'])).toBe(EXIT.usage);
    expect(strip(err.join(''))).toMatch(/eval_every_steps must be a whole number.*\(got 2\.5\)/);
    err = [];
    expect(await main([...g, 'set', 'r1', '--eval-every', 'often', '--reason', 'x'])).toBe(EXIT.usage);
    expect(strip(err.join(''))).toMatch(/--eval-every needs a number, got "often"/);
    err = [];
    expect(await main([...g, 'set', 'r1', '--reason', 'x'])).toBe(EXIT.usage);
    expect(strip(err.join(''))).toMatch(/nothing to change: give learning_rate, async_level, eval_every_steps/);
  });

  test('--help lists the flag with an example', async () => {
    expect(await main(['set', '--help'])).toBe(EXIT.ok);
    expect(out.join('')).toMatch(/--eval-every <n>/);
    expect(out.join('')).toMatch(/ratchet set smoke-1 --eval-every 10 --reason/);
  });
});

describe('how status and the report show the sweeps', () => {
  const sweep = { workflow_id: 'r-step-1-eval', policy_version: 2, taskset: 'heldout', k: 2, every_steps: 2 };
  const record = (step: number, extra: Record<string, unknown> = {}) => StepRecord.parse({
    format: 'ratchet.step/v1', run_id: 'r', step, time: `2026-11-25T10:0${step}:00Z`, policy_version: step + 1, mean_reward: 0.5, timing_ms: { step: 1000 }, ...extra,
  });
  const result = (version: number, passAt1: number | null, workflowId?: string) => EvalResult.parse({
    format: 'ratchet.eval/v1', run_id: 'r', policy_version: version, taskset: { name: 'heldout', path: '/t/heldout.jsonl', hash: 'h1', tasks: 2 }, k: 2, episodes: 4,
    pass_at: passAt1 === null ? null : { 1: passAt1, 2: passAt1 }, reward: { mean: 0.25, std: 0.1 }, components: {}, localization: { file: null, function: null },
    per_episode: { tokens: 100, tool_calls: 2 }, per_task: [], started_at: '2026-11-25T10:02:00Z', finished_at: `2026-11-25T10:0${version}:30Z`, episodes_per_minute: 1,
    ...(workflowId ? { workflow_id: workflowId } : {}),
  });

  test('`ratchet status`: the sweep a step started, the newest sweep\'s state, the newest stored result', () => {
    expect(strip(evalSweepLine(sweep))).toBe('  ⏵ eval sweep r-step-1-eval started on v2 (heldout, k=2, every 2 steps)');
    expect(strip(lastEvalLine({ ...sweep, step: 1, state: 'running' }))).toMatch(/eval of v2 \(after step 1, r-step-1-eval\): running below training/);
    expect(strip(lastEvalLine({ ...sweep, step: 1, state: 'failed', error: 'every episode of policy v2 failed' }))).toMatch(/failed: every episode of policy v2 failed/);
    const summary = { version: 2, key: 'k', passAt1: 0.5, passAtK: 0.75, meanReward: 0.3, fileF1: null, functionF1: null, episodes: 4, errors: 0 };
    expect(strip(lastEvalLine({ ...sweep, step: 1, state: 'completed', result: summary }))).toMatch(/pass@1 50\.0% · reward 0\.300 · file F1 — · 4 eps/);
    expect(latestEvalLine([])).toBeUndefined();
    expect(latestEvalLine([result(2, 0.5), result(4, 0.25, 'r-step-3-eval'), result(3, 1)])).toBe(
      'latest eval: v4 on heldout (k=2) pass@1 25.0% · reward 0.250 · file F1 — · 4 eps · r-step-3-eval');
  });

  test('the report lists each in-run sweep with its result, or says it has none yet', () => {
    const steps = [record(0), record(1, { eval_sweep: sweep }), record(3, { eval_sweep: { ...sweep, workflow_id: 'r-step-3-eval', policy_version: 4 } })].map(reportStep);
    expect(steps[1]!.eval_sweep).toEqual(sweep);
    const data = buildReportData('r', steps, [result(2, 0.5, 'r-step-1-eval'), result(2, 0.9)]);
    expect(data.evalSweeps).toEqual([
      // The sweep's own result wins over another sweep's of the same version (a schedule's, say).
      { step: 1, workflowId: 'r-step-1-eval', policyVersion: 2, taskset: 'heldout', k: 2, result: { passAt1: 0.5, reward: 0.25, episodes: 4 } },
      { step: 3, workflowId: 'r-step-3-eval', policyVersion: 4, taskset: 'heldout', k: 2 },
    ]);
    const html = renderReportHtml(data, '');
    expect(html).toContain('In-run eval sweeps');
    expect(html).toContain('<code>r-step-1-eval</code>');
    expect(html).toMatch(/no result yet: running, or failed \(<code>temporal workflow describe -w r-step-3-eval<\/code>\)/);
  });
});
