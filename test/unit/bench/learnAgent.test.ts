/**
 * bench:learn's multi-turn figures (src/bench/learnAgent.ts), on small tables of cases.
 *
 * The "the agent case's design (issue 38)" block:
 * bench:learn's agent case, the pieces issue 38 fixes before it runs: eval seeds from the task and the
 * sample only (common random numbers across arms), the reward as file F1 (a wrong answer and silence
 * both 0) through the real rubric, the pre-flight's decision, disjoint task sets, early stopping on the
 * held-out demonstration loss, and the path-only demonstration procedure.
 */
import { episodeBehaviour, heldOutSplit, pairedDifference, agentSplit, assertDisjoint, fileF1Weights, maskedNll, preflightDecision, sftStopping } from '../../../src/bench/learnAgent';
import type { ChatMessage } from '../../../src/contracts/trajectory';
import type { EvalPlan } from '../../../src/contracts/eval';
import { agentCommand, AGENT_DEFAULTS, parseAgentArgs } from '../../../src/bench/learnAgentBench';
import { sweGrepRubric } from '../../../src/envs/swe-grep/rewards';
import { scoreRubric, type ScoreInput } from '../../../src/envs/types';
import { evalSeed } from '../../../src/shared/evalSeed';
import { evalRolloutInput } from '../../../src/workflows/evalSweep';
import { findModuleCommand, firstFoundPath, moduleFileOfTest, sweGrepPathSolver } from '../../../src/sft/solvers/sweGrep';
import type { Task } from '../../../src/tasks/schema';

const callMsg = (name: string): ChatMessage => ({ role: 'assistant', content: '', tool_calls: [{ id: name, type: 'function', function: { name, arguments: '{}' } }] });
const tool: ChatMessage = { role: 'tool', content: 'out', tool_call_id: 'x' };
const turns = (n: number) => Array.from({ length: n }, () => ({}) as never);

describe('episodeBehaviour', () => {
  test.each([
    ['search then answer', [callMsg('bash'), tool, callMsg('bash'), tool, callMsg('result'), tool], 3, { toolCalls: 3, answered: true, searchedBeforeAnswer: true }],
    ['answer at once', [callMsg('result'), tool], 1, { toolCalls: 1, answered: true, searchedBeforeAnswer: false }],
    ['search, never answer', [callMsg('bash'), tool, { role: 'assistant', content: 'done' } as ChatMessage], 2, { toolCalls: 1, answered: false, searchedBeforeAnswer: false }],
    ['prose only', [{ role: 'assistant', content: 'src/a.py' } as ChatMessage], 1, { toolCalls: 0, answered: false, searchedBeforeAnswer: false }],
  ])('%s', (_name, msgs, n, want) => {
    expect(episodeBehaviour({ messages: [{ role: 'user', content: 'q' }, ...msgs], turns: turns(n) })).toEqual({ turns: n, ...want });
  });
});

describe('heldOutSplit', () => {
  const tasks = [...Array.from({ length: 10 }, (_, i) => ({ repo: 'boltons', id: `b${i}` })), ...Array.from({ length: 3 }, (_, i) => ({ repo: 'attrs', id: `a${i}` }))];
  test('the unseen package is all held out, random rows come from the rest, nothing trains twice, seeded', () => {
    const s = heldOutSplit(tasks, 'attrs', 3, 7);
    expect(s.unseenPackage.map((t) => t.id)).toEqual(['a0', 'a1', 'a2']);
    expect(s.randomRows).toHaveLength(3);
    expect(s.train).toHaveLength(7);
    expect(s.train.every((t) => t.repo === 'boltons')).toBe(true);
    expect(new Set([...s.train, ...s.randomRows].map((t) => t.id)).size).toBe(10);
    expect(heldOutSplit(tasks, 'attrs', 3, 7)).toEqual(s);
    expect(heldOutSplit(tasks, 'attrs', 3, 8).randomRows).not.toEqual(s.randomRows);
    expect(() => heldOutSplit(tasks, 'numpy', 3, 7)).toThrow(/no task comes from package "numpy".*boltons, attrs/);
  });
});

describe('pairedDifference', () => {
  test('per task: mean over the arm\'s seeds, run minus control; unpaired tasks counted, not used', () => {
    const run = new Map([['t1', [1, 1]], ['t2', [0.5, 0.5]], ['t3', [1]]]);
    const control = new Map([['t1', [0, 0]], ['t2', [0.5, 0.5]], ['t4', [0]]]);
    const d = pairedDifference(run, control);
    expect(d.tasks).toBe(2);
    expect(d.unpaired).toBe(2);
    expect(d.mean).toBeCloseTo(0.5, 10);
    expect(d.lo).toBeLessThanOrEqual(d.mean);
    expect(d.hi).toBeGreaterThanOrEqual(d.mean);
  });
  test('no difference gives an interval around 0', () => {
    const same = new Map(Array.from({ length: 20 }, (_, i) => [`t${i}`, [i % 3 === 0 ? 1 : 0]] as [string, number[]]));
    const d = pairedDifference(same, same);
    expect([d.mean, d.lo, d.hi]).toEqual([0, 0, 0]);
  });
});

describe("the agent case's design (issue 38)", () => {
  const plan: EvalPlan = {
    runId: 'r1', taskset: { name: 'h', path: '/tmp/h.jsonl', hash: 'h', tasks: 2 }, k: 2, versions: [3], skipped: [],
    tasks: [], envId: 'swe-grep', taskSetDir: '/tmp', sampling: { temperature: 1, top_p: 1, top_k: 0, max_tokens: 64, tool_choice: 'auto', history: 'tokens' },
    envArgs: { max_tokens: 1, max_tool_calls: 1, max_turns: 1, few_shot: false }, rubric: {}, sandbox: {} as EvalPlan['sandbox'],
    inferenceBaseUrl: 'http://x/v1', servedModel: 'm', seed: 0, adapters: {},
  };

  describe('eval seeds by task and sample', () => {
    test('FNV-1a of the task id, then the sample mixed in: a value computed by hand', () => {
      // FNV-1a 32 of "t1" (0x811c9dc5, xor each char, times 0x01000193): 138734806, computed in Python.
      let h = 138734806;
      h = (h ^ Math.imul(0 + 1, 0x9e3779b1)) >>> 0;
      h = Math.imul(h ^ (h >>> 16), 0x85ebca6b) >>> 0;
      expect(evalSeed('t1', 0)).toBe((h ^ (h >>> 13)) & 0x7fffffff);
    });
    test('two runs and versions get the same seed for a task and sample; other tasks and samples differ', () => {
      const cr = { ...plan, seeds: 'task-sample' as const };
      const a = evalRolloutInput(cr, 3, 't1', 'h.jsonl', 0, 1).seed;
      expect(evalRolloutInput({ ...cr, runId: 'other', seed: 7 }, 0, 't1', 'h.jsonl', 5, 1).seed).toBe(a);
      expect(evalRolloutInput(cr, 3, 't1', 'h.jsonl', 0, 0).seed).not.toBe(a);
      expect(evalRolloutInput(cr, 3, 't2', 'h.jsonl', 0, 1).seed).not.toBe(a);
      const seeds = new Set(Array.from({ length: 50 }, (_, i) => evalSeed(`task-${i}`, i % 2)));
      expect(seeds.size).toBe(50);
      for (const s of seeds) expect(s).toBeLessThan(2 ** 31);
    });
    test('plans without `seeds` keep the run-and-version seeds (histories from before it)', () => {
      expect(evalRolloutInput(plan, 3, 't1', 'h.jsonl', 0, 1).seed).toBe(3 * 7919 + 1);
      expect(evalRolloutInput(plan, 4, 't1', 'h.jsonl', 0, 1).seed).toBe(4 * 7919 + 1);
    });
  });

  describe('reward: file F1 through the swe-grep rubric', () => {
    const task = { instance_id: 't', repo: 'r', gold_files: ['pkg/a.py'], FAIL_TO_PASS: [], PASS_TO_PASS: [] } as unknown as Task;
    const input = (files: string[] | undefined, stop: ScoreInput['stop_reason']): ScoreInput => ({
      task, final: files ? { files } : {}, answered: files !== undefined, stop_reason: stop,
      stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} } as never, limits: {} as never,
    });
    const reward = (i: ScoreInput) => scoreRubric(sweGrepRubric, i, fileF1Weights(sweGrepRubric)).total;
    test('right 1, wrong 0, silence (cut off at a limit) 0, one right of two: its F1', () => {
      expect(reward(input(['pkg/a.py'], 'completed'))).toBe(1);
      expect(reward(input(['pkg/b.py'], 'completed'))).toBe(0);
      expect(reward(input(undefined, 'max_turns'))).toBe(0);
      expect(reward(input(undefined, 'max_tool_calls'))).toBe(0);
      // precision 1/2, recall 1: F1 = 2 * 0.5 * 1 / 1.5.
      expect(reward(input(['pkg/a.py', 'pkg/b.py'], 'completed'))).toBeCloseTo(2 / 3, 12);
    });
    test('the preset needs a file_f1 reward', () => {
      expect(() => fileF1Weights([{ name: 'tests_pass', weight: 1 }])).toThrow(/no file_f1 reward/);
    });
  });

  describe('pre-flight', () => {
    /** `tasks` tasks of k = 4 samples: the first `mixed` pass 2 of 4, the next `solved` pass all, the rest none. */
    const groups = (tasks: number, mixed: number, solved: number) => Array.from({ length: tasks }, (_, i) =>
      i < mixed ? [1, 0, 1, 0] : i < mixed + solved ? [1, 1, 1, 1] : [0, 0, 0, 0]);
    const band: [number, number] = [0.15, 0.85];
    test('inside the band with tasks that vary: signal; outside the band: no signal possible, saying which side', () => {
      expect(preflightDecision(groups(16, 8, 4), 1, band, 0.33)).toMatchObject({ passed: 32, episodes: 64, passRate: 0.5, informativeTasks: 8, tasks: 16, signal: true });
      expect(preflightDecision(groups(16, 0, 1), 1, band, 0.33)).toMatchObject({ signal: false, reason: expect.stringMatching(/4 of 64 .* below 0.15/) });
      expect(preflightDecision(groups(16, 1, 15), 1, band, 0.33)).toMatchObject({ signal: false, reason: expect.stringMatching(/above 0.85/) });
      expect(preflightDecision([], 1, band, 0.33)).toMatchObject({ signal: false, reason: 'the pre-flight scored no episode' });
      expect(() => preflightDecision([[1, 1]], 1, [0.9, 0.1], 0.33)).toThrow(/not 0 <= lo <= hi <= 1/);
    });
    test('a pass rate of 0.5 from tasks that are always or never solved is no signal (the first full run: identical groups)', () => {
      // Half the tasks solved every time, half never: pooled pass rate 0.5, not one informative group.
      const d = preflightDecision(groups(16, 0, 8), 1, band, 0.33);
      expect(d).toMatchObject({ passRate: 0.5, informativeTasks: 0, signal: false, reason: expect.stringMatching(/0 of 16 tasks .* below 0.33/) });
      // The bound's edge is inside: 6 of 18 = 1/3 >= 0.33.
      expect(preflightDecision(groups(18, 6, 5), 1, band, 0.33).signal).toBe(true);
      expect(preflightDecision(groups(18, 5, 6), 1, band, 0.33).signal).toBe(false);
    });
    test('partial F1 below the pass reward is not a pass, but it does make a group informative', () => {
      const d = preflightDecision([[0.67, 0.67, 1, 0], [0.5, 0, 0, 0], [1, 1, 1, 1]], 1, [0, 1], 0.5);
      expect(d).toMatchObject({ passed: 5, informativeTasks: 2, signal: true });
    });
    test('one sample a task cannot show variance: refused with the fix', () => {
      expect(preflightDecision([[1], [0]], 1, band, 0.33)).toMatchObject({ signal: false, reason: expect.stringMatching(/sampled once.*Fix: --preflight-k/) });
    });
  });

  describe('task sets', () => {
    const tasks = [
      ...Array.from({ length: 40 }, (_, i) => ({ repo: 'boltons', instance_id: `b-${i}` })),
      ...Array.from({ length: 30 }, (_, i) => ({ repo: 'toolz', instance_id: `t-${i}` })),
      ...Array.from({ length: 10 }, (_, i) => ({ repo: 'inflection', instance_id: `i-${i}` })),
    ];
    test('demonstration tasks, RL pool, primary and secondary held out: disjoint, covering the training packages, seeded', () => {
      const s = agentSplit(tasks, { heldOutPackage: 'inflection', evalRandom: 24, evalUnseen: 6, demoTasks: 20, seed: 1 });
      expect([s.demo.length, s.rl.length, s.random.length, s.unseen.length]).toEqual([20, 26, 24, 6]);
      const ids = [...s.demo, ...s.rl, ...s.random, ...s.unseen].map((t) => t.instance_id);
      expect(new Set(ids).size).toBe(ids.length);
      // Every training-package task is in exactly one of demo, RL pool, primary held out.
      expect(new Set([...s.demo, ...s.rl, ...s.random].map((t) => t.instance_id))).toEqual(new Set(tasks.filter((t) => t.repo !== 'inflection').map((t) => t.instance_id)));
      expect(s.unseen.every((t) => t.repo === 'inflection')).toBe(true);
      expect([...s.demo, ...s.rl, ...s.random].some((t) => t.repo === 'inflection')).toBe(false);
      expect(agentSplit(tasks, { heldOutPackage: 'inflection', evalRandom: 24, evalUnseen: 6, demoTasks: 20, seed: 1 })).toEqual(s);
      expect(() => agentSplit(tasks, { heldOutPackage: 'inflection', evalRandom: 24, evalUnseen: 6, demoTasks: 45, seed: 1 })).toThrow(/cannot give 45 demonstration tasks.*Fix:/);
    });
    test('assertDisjoint names the task and both sets', () => {
      expect(() => assertDisjoint({ demo: [{ instance_id: 'a' }], rl: [{ instance_id: 'b' }, { instance_id: 'a' }] })).toThrow('task a is in both the demo and the rl tasks');
    });
  });

  describe('SFT stopped on the held-out demonstration loss', () => {
    test('the best step so far; stop once patience steps passed without a lower loss', () => {
      expect(sftStopping([], 2)).toEqual({ best: -1, stop: false });
      expect(sftStopping([3, 2, 1.5], 2)).toEqual({ best: 2, stop: false });
      expect(sftStopping([3, 2, 2.5], 2)).toEqual({ best: 1, stop: false });
      expect(sftStopping([3, 2, 2.5, 2.0], 2)).toEqual({ best: 1, stop: true }); // a tie is no improvement
    });
    test('maskedNll: minus the logprob of each trained token, from vLLM\'s prompt_logprobs', () => {
      const lp: (Record<string, { logprob: number }> | null)[] = [null, { 5: { logprob: -1 } }, { 6: { logprob: -0.5 } }, { 7: { logprob: -2 } }];
      expect(maskedNll([4, 5, 6, 7], [0, 0, 1, 1], lp)).toEqual({ sum: 2.5, tokens: 2 });
      expect(() => maskedNll([4, 5, 6, 9], [0, 0, 1, 1], lp)).toThrow(/no prompt logprob for token 3 \(id 9\)/);
    });
  });

  describe('the path-only demonstration procedure', () => {
    test('the module named after the test, found outside the tests; the answer is the path find printed', () => {
      expect(moduleFileOfTest('tests/test_queueutils.py')).toBe('queueutils.py');
      expect(moduleFileOfTest('toolz/tests/test_itertoolz.py')).toBe('itertoolz.py');
      expect(moduleFileOfTest('tests/conftest.py')).toBeUndefined();
      expect(findModuleCommand('queueutils.py')).toBe('find . -name "queueutils.py" -not -path "*/tests/*" -not -path "*/test/*"');
      expect(firstFoundPath('./boltons/queueutils.py\n./build/lib/boltons/queueutils.py\n')).toBe('boltons/queueutils.py');
      expect(firstFoundPath('\n[exit code 0]')).toBeUndefined();
    });
    test('an episode: find, then a result with the path only (no function, no line number)', async () => {
      const solver = sweGrepPathSolver({ FAIL_TO_PASS: ['tests/test_queueutils.py::test_heap_queue'] });
      const req = (tool: string[]) => ({ messages: [{ role: 'user', content: 'q' }, ...tool.map((c) => ({ role: 'tool', content: c }))] }) as never;
      const first = await solver.complete(req([]));
      expect(first.tool_calls![0]!.function).toEqual({ name: 'bash', arguments: JSON.stringify({ command: findModuleCommand('queueutils.py') }).replace('":"', '": "') });
      const second = await solver.complete(req(['./boltons/queueutils.py\n\n[exit code 0]']));
      expect(second.tool_calls![0]!.function).toEqual({ name: 'result', arguments: '{"files": ["boltons/queueutils.py"]}' });
    });
  });

  describe('the command line', () => {
    test('every option spelled out, and read back to the same options', () => {
      const o = { ...AGENT_DEFAULTS, seeds: 3, preflightLo: 0.2 };
      const cmd = agentCommand(o);
      expect(parseAgentArgs(cmd.split(' ').slice(4))).toEqual(o);
    });
  });
});
