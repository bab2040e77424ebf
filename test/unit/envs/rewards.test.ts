import type { AgentStats } from '../../../src/agent/loop';
import { codeRepairRubric, testsPass } from '../../../src/envs/code-repair/rewards';
import { diffSimilarity, parseDiffFiles, sequenceRatio } from '../../../src/envs/code-repair/diff-similarity';
import { debugRubric, fixedTests } from '../../../src/envs/debug/rewards';
import { bareFunction, setScores, sweGrepRubric } from '../../../src/envs/swe-grep/rewards';
import type { TestEvidence } from '../../../src/envs/tests';
import { scoreRubric, zeroScore, type ScoreInput } from '../../../src/envs/types';
import { Task } from '../../../src/tasks/schema';

const gold = `diff --git a/pkg/calc.py b/pkg/calc.py
--- a/pkg/calc.py
+++ b/pkg/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
`;
const task = Task.parse({
  instance_id: 'demo-1', repo: 'demo', base_commit: 'abc', problem_statement: 'add is wrong', patch: gold,
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'],
  gold_functions: ['pkg/calc.py::add'],
});
const stats: AgentStats = { prompt_tokens: 0, completion_tokens: 0, tool_calls: 1, tool_errors: 0, commands: [], tools_used: {} };
const base: ScoreInput = { task, final: {}, answered: false, stop_reason: 'completed', stats, limits: { max_tokens: 100, max_tool_calls: 5, max_turns: 5 } };
const comp = (rubric: typeof sweGrepRubric, i: Partial<ScoreInput>) => scoreRubric(rubric, { ...base, ...i }).components;

describe('swe-grep rubric', () => {
  test.each<[string, Partial<ScoreInput>, Record<string, number>]>([
    ['exact answer', { final: { files: ['pkg/calc.py'], functions: ['add'] }, answered: true },
      { correct_files: 1, incorrect_files_penalty: -0, missed_files_penalty: -0, completion_bonus: 1, file_f1: 1, function_f1: 1, max_tokens_penalty: 0 }],
    ['prefixes are normalized', { final: { files: ['/work/repo/pkg/calc.py', './other.py'] }, answered: true },
      { correct_files: 1, incorrect_files_penalty: -0.5, file_precision: 0.5, file_recall: 1, function_f1: 0 }],
    ['wrong file', { final: { files: ['x.py'] }, answered: true },
      { correct_files: 0, incorrect_files_penalty: -1, missed_files_penalty: -1, completion_bonus: 1, file_f1: 0 }],
    ['no answer (plain text)', { final: { files: [] }, answered: false },
      { correct_files: 0, incorrect_files_penalty: 0, missed_files_penalty: -1, completion_bonus: 0 }],
    ['ran out of tokens', { stop_reason: 'max_tokens' }, { max_tokens_penalty: -1, max_tool_calls_penalty: 0, completion_bonus: 0 }],
    ['ran out of tool calls', { stop_reason: 'max_tool_calls' }, { max_tool_calls_penalty: -1, max_tokens_penalty: 0 }],
  ])('%s', (_n, i, expected) => {
    expect(comp(sweGrepRubric, i)).toMatchObject(expected);
  });

  test('weights: defaults, overrides from [[env]].rubric, unknown names rejected', () => {
    const i = { ...base, final: { files: ['pkg/calc.py'] }, answered: true };
    expect(scoreRubric(sweGrepRubric, i).total).toBeCloseTo(1 + 0.2);
    expect(scoreRubric(sweGrepRubric, i, { file_f1: 2, completion_bonus: 0 }).total).toBeCloseTo(1 + 2);
    expect(() => scoreRubric(sweGrepRubric, i, { typo_bonus: 1 })).toThrow(/typo_bonus.*known: correct_files/);
    expect(zeroScore(sweGrepRubric).total).toBe(0);
  });

  test.each([
    [['a', 'b'], ['a'], { precision: 0.5, recall: 1 }],
    [[], ['a'], { precision: 0, recall: 0, f1: 0 }],
    [[], [], { recall: 1 }],
  ])('setScores(%j, %j)', (p, g, expected) => expect(setScores(p, g)).toMatchObject(expected));

  test.each([['pkg/calc.py::Calc.add', 'add'], ['add', 'add'], ['add()', 'add'], ['mod.add', 'add']])('bareFunction(%s)', (a, b) => expect(bareFunction(a)).toBe(b));
});

describe('diff similarity (difflib ratio, per file, / max(files))', () => {
  // Expected values computed with Python's difflib.SequenceMatcher(None, a, b, autojunk=False).ratio().
  test.each<[string[], string[], number]>([
    [['-    return a+b', '+    return a-b', ' x'], ['-    return a+b', '+    return a*b', ' x'], 2 / 3],
    ['abcdefgh'.split(''), 'axcyefzh'.split(''), 0.625],
    [['q', 'a', 'b', 'c', 'q'], ['a', 'b', 'q', 'c'], 2 / 3],
    [[], [], 1],
    [['a'], [], 0],
  ])('sequenceRatio %#', (a, b, r) => expect(sequenceRatio(a, b)).toBeCloseTo(r, 10));

  const other = `diff --git a/README b/README\n--- a/README\n+++ b/README\n@@ -1 +1 @@\n-x\n+y\n`;
  const near = gold.replace('return a + b', 'return b + a').replace('@@ -1,2 +1,2 @@', '@@ -10,2 +10,2 @@');
  test.each<[string, string, number]>([
    ['identical', gold, 1],
    ['hunk line numbers and context do not matter; one of two changed lines differs', near, 0.5],
    ['gold file plus an extra file halves it', gold + other, 0.5],
    ['a different file', other, 0],
    ['empty diff', '', 0],
  ])('%s', (_n, generated, expected) => expect(diffSimilarity(generated, gold)).toBeCloseTo(expected, 10));

  test('parses plain ---/+++ diffs too', () => {
    expect([...parseDiffFiles('--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a\n+b\n').entries()]).toEqual([['x.py', ['-a', '+b']]]);
  });
});

const ev = (results: Record<string, TestEvidence['results'][string]>, over: Partial<TestEvidence> = {}): TestEvidence => ({ applied: true, ran: true, results, ...over });
const F = 'tests/test_calc.py::test_add';
const P = 'tests/test_calc.py::test_sub';

describe('code-repair tests reward', () => {
  test.each<[string, TestEvidence | undefined, number]>([
    ['all pass', ev({ [F]: 'passed', [P]: 'passed' }), 1],
    ['fix but broke another test', ev({ [F]: 'passed', [P]: 'failed' }), 0],
    ['not fixed', ev({ [F]: 'failed', [P]: 'passed' }), 0],
    ['test missing from output', ev({ [F]: 'missing', [P]: 'passed' }), 0],
    ['diff did not apply', ev({ [F]: 'passed', [P]: 'passed' }, { applied: false }), 0],
    ['no test run', undefined, 0],
  ])('%s', (_n, tests, expected) => expect(testsPass({ ...base, tests })).toBe(expected));

  test('components: diff similarity and tests, each reported', () => {
    const c = comp(codeRepairRubric, { final: { diff: gold }, tests: ev({ [F]: 'passed', [P]: 'passed' }) });
    expect(c).toEqual({ diff_similarity: 1, tests_pass: 1, fail_to_pass: 1, pass_to_pass: 1, patch_applies: 1, produced_diff: 1 });
  });
});

describe('debug reward: FAIL_TO_PASS passing, zero if any PASS_TO_PASS fails', () => {
  const t2 = Task.parse({ ...task, FAIL_TO_PASS: ['a', 'b'], PASS_TO_PASS: ['c'] });
  test.each<[string, TestEvidence, number]>([
    ['both fixed', ev({ a: 'passed', b: 'passed', c: 'passed' }), 1],
    ['half fixed', ev({ a: 'passed', b: 'failed', c: 'passed' }), 0.5],
    ['fixed but broke c', ev({ a: 'passed', b: 'passed', c: 'error' }), 0],
    ['not run', ev({}, { ran: false }), 0],
  ])('%s', (_n, tests, expected) => expect(fixedTests({ ...base, task: t2, tests })).toBe(expected));
  test('used_debugger is reported', () => {
    expect(comp(debugRubric, { stats: { ...stats, tools_used: { pdb: 2 } } }).used_debugger).toBe(1);
  });
});
