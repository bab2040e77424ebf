import type { EvalPlan } from '../../../src/contracts/eval';
import { RolloutInput } from '../../../src/contracts/rollout';
import { ENVIRONMENTS } from '../../../src/envs/registry';
import { normalizePath } from '../../../src/envs/shell';
import { bareFunction, setScores } from '../../../src/envs/swe-grep/rewards';
import { scoreRubric, type EvalMetrics } from '../../../src/envs/types';
import { episodeSolved, meanPrf, passAtK, scoreEval, splitEpisodes, type ScoredEpisode } from '../../../src/evals/scoring';
import { resolveTaskset } from '../../../src/evals/tasksets';
import { runKeys } from '../../../src/artifacts/keys';
import type { RolloutSummary } from '../../../src/contracts/trajectory';
import { goldFiles, Task } from '../../../src/tasks/schema';
import { parseRunConfig } from '../../../src/config/load';
import { EVAL_STEP } from '../../../src/shared/steps';
import { evalRolloutInput, servesAdapter } from '../../../src/workflows/evalSweep';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runVersions } from '../../../src/activities/eval';

/** Brute force pass@k: the fraction of k-subsets with at least one pass. */
function bruteForce(n: number, c: number, k: number): number {
  const outcomes = Array.from({ length: n }, (_, i) => i < c);
  let total = 0;
  let hit = 0;
  const rec = (start: number, chosen: boolean[]) => {
    if (chosen.length === k) { total++; if (chosen.some(Boolean)) hit++; return; }
    for (let i = start; i < n; i++) rec(i + 1, [...chosen, outcomes[i]!]);
  };
  rec(0, []);
  return hit / total;
}

describe('passAtK (unbiased estimator)', () => {
  it.each([[1, 0, 1, 0], [1, 1, 1, 1], [4, 1, 1, 0.25], [4, 2, 4, 1], [10, 3, 1, 0.3]])('n=%i c=%i k=%i -> %f', (n, c, k, want) => {
    expect(passAtK(n, c, k)).toBeCloseTo(want, 10);
  });
  it('matches brute force over subsets', () => {
    for (const [n, c, k] of [[5, 2, 2], [6, 1, 3], [8, 3, 4], [7, 0, 2]] as const) {
      expect(passAtK(n, c, k)).toBeCloseTo(bruteForce(n, c, k), 10);
    }
  });
  it('rejects k > n with a reason', () => {
    expect(() => passAtK(2, 1, 4)).toThrow(/at least 4 samples/);
  });
});

describe('meanPrf', () => {
  it('macro-averages', () => {
    const r = meanPrf([{ precision: 1, recall: 1, f1: 1 }, { precision: 0.5, recall: 1, f1: 2 / 3 }])!;
    expect(r.episodes).toBe(2);
    expect(r.precision).toBeCloseTo(0.75);
    expect(r.recall).toBeCloseTo(1);
  });
  it('is null without any episode', () => {
    expect(meanPrf([])).toBeNull();
  });
});

const task = (id: string, f2p: string[]) => Task.parse({
  instance_id: id, repo: 'pkg/x', base_commit: 'abc', problem_statement: 'it breaks',
  patch: `diff --git a/src/${id}.py b/src/${id}.py\n--- a/src/${id}.py\n+++ b/src/${id}.py\n@@ -1 +1 @@\n-a\n+b\n`,
  test_patch: '', FAIL_TO_PASS: f2p, PASS_TO_PASS: [], gold_functions: [`src/${id}.py::fix_me`],
  source: { type: 'snapshot', repo_path: '/tmp/x' },
});

const summary = (id: string, i: number, reward: number, components: Record<string, number>): RolloutSummary => ({
  task_id: id, group_id: `g-${id}`, rollout_index: i, trajectory: { uri: 'file:///x', sha256: '0'.repeat(64), bytes: 1 },
  reward, components, stop_reason: 'completed', policy_version: 3, completion_tokens: 100, tool_calls: 4, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
});

const plan: EvalPlan = {
  runId: 'r1', taskset: { name: 'heldout', path: '/tmp/h.jsonl', hash: 'h', tasks: 2 }, k: 2, versions: [3], skipped: [],
  tasks: [], envId: 'code-repair', taskSetDir: '/tmp', sampling: { temperature: 1, top_p: 1, top_k: 0, max_tokens: 64, tool_choice: 'auto', history: 'tokens' },
  envArgs: { max_tokens: 1, max_tool_calls: 1, max_turns: 1, few_shot: false }, rubric: {}, sandbox: {} as EvalPlan['sandbox'],
  inferenceBaseUrl: 'http://x/v1', servedModel: 'm', seed: 0, adapters: {},
};

const codeRepair = ENVIRONMENTS['code-repair'].evalMetrics!;
const sweGrep = ENVIRONMENTS['swe-grep'].evalMetrics!;
const span = { startedAt: '2025-01-01T00:00:00Z', finishedAt: '2025-01-01T00:02:00Z' };

describe('scoreEval', () => {
  it('computes pass@1 and pass@k where the environment says what solved is (code-repair: tests_pass)', () => {
    const ep: ScoredEpisode[] = [
      { instanceId: 't1', summary: summary('t1', 0, 1, { tests_pass: 1 }), promptTokens: 50 },
      { instanceId: 't1', summary: summary('t1', 1, 0, { tests_pass: 0 }), promptTokens: 50 },
      { instanceId: 't2', summary: summary('t2', 0, 0, { tests_pass: 0 }), promptTokens: 50 },
      { instanceId: 't2', summary: summary('t2', 1, 0, { tests_pass: 0 }), promptTokens: 50 },
    ];
    const tasks = new Map([['t1', task('t1', ['test_a'])], ['t2', task('t2', ['test_b'])]]);
    const r = scoreEval({ plan, version: 3, episodes: ep, errors: 1, tasks, metrics: codeRepair, ...span });
    expect(r.pass_at).toEqual({ 1: 0.25, 2: 0.5 });
    expect(r.errors).toBe(1);
    expect(r.episodes_per_minute).toBeCloseTo(2);
    expect(r.localization).toEqual({ file: null, function: null });
    expect(r.per_episode.tokens).toBe(150);
    expect(r.per_task.find((t) => t.instance_id === 't1')).toMatchObject({ n: 2, passed: 1 });
  });
  it('has no pass@k for a set without tests, nor for an environment without a solved reward', () => {
    const ep: ScoredEpisode[] = [0, 1].map((i) => ({ instanceId: 't1', summary: summary('t1', i, 0.5, { tests_pass: 1 }), promptTokens: 0 }));
    expect(scoreEval({ plan, version: 3, episodes: ep, errors: 0, tasks: new Map([['t1', task('t1', [])]]), metrics: codeRepair, ...span }).pass_at).toBeNull();
    const r = scoreEval({ plan, version: 3, episodes: ep, errors: 0, tasks: new Map([['t1', task('t1', ['test_a'])]]), metrics: {}, ...span });
    expect(r.pass_at).toBeNull();
    expect(r.per_task[0]!.passed).toBeNull();
    expect(r.localization).toEqual({ file: null, function: null });
  });
  it('episodeSolved reads the environment\'s solved reward, null when it has none', () => {
    expect(episodeSolved(summary('t', 0, 1, { tests_pass: 1 }), codeRepair.solved)).toBe(true);
    expect(episodeSolved(summary('t', 0, 1, {}), codeRepair.solved)).toBeNull();
    expect(episodeSolved(summary('t', 0, 1, { tests_pass: 1 }), undefined)).toBeNull();
    // debug: fail_to_pass is 1 only when all FAIL_TO_PASS pass and no PASS_TO_PASS broke
    const debug = ENVIRONMENTS.debug.evalMetrics!.solved;
    expect(episodeSolved(summary('t', 0, 1, { fail_to_pass: 1, pass_to_pass: 1 }), debug)).toBe(true);
    expect(episodeSolved(summary('t', 0, 0.5, { fail_to_pass: 0.5, pass_to_pass: 1 }), debug)).toBe(false);
  });

  it('swe-grep: localization from its rewards equals the precision / recall / F1 of its answers against the gold sets', () => {
    const noFns = Task.parse({ ...task('t3', []), gold_functions: [] });
    const tasks = new Map([['t1', task('t1', ['test_a'])], ['t2', task('t2', [])], ['t3', noFns]]);
    const answers: [string, Record<string, unknown>][] = [
      ['t1', { files: ['src/t1.py'], functions: ['src/t1.py::fix_me'] }],
      ['t1', { files: ['./src/t1.py', 'src/other.py'], functions: ['other', 'Cls.fix_me'] }],
      ['t2', { files: [], functions: [] }],
      ['t2', { files: ['src/other.py'], functions: ['fix_me()'] }],
      ['t3', { files: ['src/t3.py'], functions: ['x'] }],
    ];
    const limits = { max_tokens: 1, max_tool_calls: 1, max_turns: 1 };
    const stats = { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} };
    const ep: ScoredEpisode[] = answers.map(([id, final], i) => {
      const s = scoreRubric(ENVIRONMENTS['swe-grep'].rubric, { task: tasks.get(id)!, final, answered: true, stop_reason: 'completed', stats, limits });
      return { instanceId: id, summary: summary(id, i, s.total, s.components), promptTokens: 0 };
    });
    const r = scoreEval({ plan: { ...plan, envId: 'swe-grep' }, version: 3, episodes: ep, errors: 0, tasks, metrics: sweGrep, ...span });

    // What the eval computed before environments declared their metrics: set scores of the answers, macro-averaged.
    const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);
    const before = (pairs: { predicted: string[]; gold: string[] }[]) => {
      const scored = pairs.filter((p) => p.gold.length > 0).map((p) => setScores(p.predicted, p.gold));
      const mean = (f: (s: (typeof scored)[number]) => number) => scored.reduce((a, s) => a + f(s), 0) / scored.length;
      return { precision: mean((s) => s.precision), recall: mean((s) => s.recall), f1: mean((s) => s.f1), episodes: scored.length };
    };
    const file = before(answers.map(([id, f]) => ({ predicted: strings(f.files).map(normalizePath).filter(Boolean), gold: goldFiles(tasks.get(id)!).map(normalizePath) })));
    const fn = before(answers.map(([id, f]) => ({ predicted: strings(f.functions).map(bareFunction).filter(Boolean), gold: (tasks.get(id)!.gold_functions ?? []).map(bareFunction) })));
    expect(r.localization.file).toEqual(file);
    expect(r.localization.function).toEqual(fn);
    expect(r.localization.function!.episodes).toBe(4);
    expect(r.pass_at).toBeNull();
  });
});

describe('environments declare their eval metrics with rewards they have', () => {
  test.each(Object.values(ENVIRONMENTS).map((e) => [e.id, e] as const))('%s', (_id, env) => {
    const rewards = new Set(env.rubric.map((r) => r.name));
    const m: EvalMetrics = env.evalMetrics ?? {};
    const named = [m.solved?.reward, ...[m.localization?.file, m.localization?.function].flatMap((p) => (p ? [p.precision, p.recall, p.f1] : []))];
    for (const name of named.filter((n): n is string => n !== undefined)) expect(rewards).toContain(name);
  });
});

describe('splitEpisodes', () => {
  it('counts failed, infra_error and setup_error episodes as errors, never as zero scores', () => {
    const ok = summary('t1', 0, 1, { tests_pass: 1 });
    const { counted, errors } = splitEpisodes([
      { instanceId: 't1', sample: 0, summary: ok },
      { instanceId: 't1', sample: 1, error: 'activity failed' },
      { instanceId: 't2', sample: 0, summary: { ...summary('t2', 0, 0, {}), stop_reason: 'setup_error' } },
      { instanceId: 't2', sample: 1, summary: { ...summary('t2', 1, 0, {}), stop_reason: 'infra_error' } },
    ]);
    expect(counted.map((e) => e.summary)).toEqual([ok]);
    expect(errors).toBe(3);
  });
});

describe('resolveTaskset', () => {
  it('maps a name into the task dir and keeps paths', () => {
    expect(resolveTaskset('heldout', '/t')).toEqual({ name: 'heldout', file: '/t/heldout.jsonl' });
    expect(resolveTaskset('/data/swe-lite.jsonl').file).toBe('/data/swe-lite.jsonl');
  });
});

describe('production registration', () => {
  it('the ratchet worker bundles EvalSweep and registers its activities', async () => {
    const workflows = await import('../../../src/workflows');
    expect(Object.keys(workflows)).toEqual(expect.arrayContaining(['TrainRun', 'StepRollouts', 'EvalSweep']));
    const { createActivities } = await import('../../../src/activities');
    const { LocalArtifactStore } = await import('../../../src/artifacts/store');
    const { logger } = await import('../../../src/shared/logger');
    const acts = createActivities({ store: new LocalArtifactStore('/tmp/ratchet-unused'), logger });
    expect(Object.keys(acts)).toEqual(expect.arrayContaining(['evalPlan', 'evalRecord', 'syncWeights']));
  });
});

describe('evalRolloutInput', () => {
  it('builds an input the rollout activity accepts, with trajectories kept apart from training steps', () => {
    const config = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
    const realPlan: EvalPlan = {
      ...plan, envId: 'swe-grep', sampling: config.sampling, envArgs: config.env[0]!.args, rubric: config.env[0]!.rubric, sandbox: config.sandbox,
    };
    const input = evalRolloutInput(realPlan, 3, 't1', 'heldout.jsonl', 0, 1);
    const parsed = RolloutInput.safeParse(input);
    expect(parsed.success ? '' : parsed.error.message).toBe('');
    expect(input.step).toBe(EVAL_STEP);
    expect(input.modelName).toBe('r1/policy-v3');
    expect(runKeys.trajectory('r1', input.step, input.groupId, 1)).toBe('runs/r1/evals/trajectories/eval-v3-t1/1.json');
    expect(runKeys.trajectory('r1', 0, 'g', 1)).toBe('runs/r1/steps/0/rollouts/g/1.json');
    expect(input.artifacts).toBeUndefined(); // no [artifacts]: the worker's default store
  });

  it("sends each episode's trajectory to the run's own store, not the rollout worker's default", () => {
    const config = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
    const artifacts = { url: 's3://bucket/runs-prefix', endpoint: 'http://10.0.0.1:9000' };
    const s3Plan: EvalPlan = {
      ...plan, envId: 'swe-grep', sampling: config.sampling, envArgs: config.env[0]!.args, rubric: config.env[0]!.rubric, sandbox: config.sandbox, artifacts,
    };
    const input = evalRolloutInput(s3Plan, 1, 't1', 'heldout.jsonl', 0, 0);
    const parsed = RolloutInput.safeParse(input);
    expect(parsed.success ? '' : parsed.error.message).toBe('');
    expect(parsed.success && parsed.data.artifacts?.url).toBe('s3://bucket/runs-prefix');
  });
});

describe('a warm-started run\'s version 0 ([model] init_from)', () => {
  const initAdapter = { uri: 'runs/sft-1/checkpoints/step-0/adapter', sha256: 'a'.repeat(64), bytes: 1024 };

  it('runVersions names the adapter the run started from as version 0, and none for a run from the base model', async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-evalv0-')));
    await store.putJson(runKeys.config('warm'), { model: { path: 'm', init: { from: 'sft-1', run_id: 'sft-1', step: 0, policy_version: 1, checkpoint: initAdapter, adapter: initAdapter } } });
    await store.putJson(runKeys.config('cold'), { model: { path: 'm' } });
    expect((await runVersions(store, 'warm')).get(0)).toEqual(initAdapter);
    const cold = await runVersions(store, 'cold');
    expect([...cold.keys()]).toEqual([0]);
    expect(cold.get(0)).toBeUndefined();
  });

  it('the sweep serves version 0 as <run>/policy-v0 when the plan names its adapter, as the base model otherwise', () => {
    const config = parseRunConfig('[[env]]\nid = "swe-grep"\n', 'x.toml');
    const base: EvalPlan = { ...plan, envId: 'swe-grep', sampling: config.sampling, envArgs: config.env[0]!.args, rubric: config.env[0]!.rubric, sandbox: config.sandbox, adapters: {} };
    const warm: EvalPlan = { ...base, adapters: { 0: initAdapter } };
    expect(servesAdapter(base, 0)).toBe(false);
    expect(evalRolloutInput(base, 0, 't1', 'heldout.jsonl', 0, 0).modelName).toBe(base.servedModel);
    expect(servesAdapter(warm, 0)).toBe(true);
    expect(evalRolloutInput(warm, 0, 't1', 'heldout.jsonl', 0, 0).modelName).toBe('r1/policy-v0');
    expect(servesAdapter(base, 2)).toBe(true);
  });
});
