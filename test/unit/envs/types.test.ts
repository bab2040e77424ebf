import { toolSpec } from '../../../src/agent/tool';
import { checkEnvironments } from '../../../src/check/data';
import { firstPrompt } from '../../../src/check/model';
import { loadRunConfig } from '../../../src/config/load';
import { getEnvironment } from '../../../src/envs/registry';
import { withPrompt } from '../../../src/envs/types';
import { loadModelTokenizer } from '../../../src/samples/tokenizer';
import { Task } from '../../../src/tasks/schema';
import { SMOLLM2_DIR, smolLM2Available } from '../../fixtures/samples/simulate';

const task = Task.parse({
  instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: [], test_cmd: 'python3 -m pytest',
});

describe('withPrompt: an environment prompt variant chosen by [env.args] prompt', () => {
  const sweGrep = getEnvironment('swe-grep');

  test('unset: the environment itself', () => {
    expect(withPrompt(sweGrep, {})).toBe(sweGrep);
  });

  test('swe-grep "compact": shorter tool schemas; the same tools, system prompt, example, task and rubric', async () => {
    const compact = withPrompt(sweGrep, { prompt: 'compact' });
    expect(compact.systemPrompt).toBe(sweGrep.systemPrompt);
    expect(compact.tools).not.toBe(sweGrep.tools);
    expect(compact.tools.map((t) => t.name)).toEqual(sweGrep.tools.map((t) => t.name));
    for (const t of compact.tools) {
      const own = sweGrep.tools.find((o) => o.name === t.name)!;
      // Same arguments, only the descriptions gone.
      const strip = (s: unknown): unknown => JSON.parse(JSON.stringify(s, (k, v) => (k === 'description' ? undefined : v)));
      expect(strip(toolSpec(t).function.parameters)).toEqual(strip(toolSpec(own).function.parameters));
    }
    expect(compact.demonstration).toBe(sweGrep.demonstration);
    expect(compact.userPrompt(task)).toBe(sweGrep.userPrompt(task));
    expect(compact.rubric).toBe(sweGrep.rubric);
    const result = compact.tools.find((t) => t.name === 'result')!;
    expect(() => result.args.parse({ files: [] })).toThrow();
    await expect(result.run(result.args.parse({ files: ['calc/ops.py'] }), {} as never)).resolves.toEqual({ content: 'Answer recorded.', answer: { files: ['calc/ops.py'], functions: [] } });
  });

  test('swe-grep "compact" renders 55 fewer SmolLM2 tokens (counts from transformers, the installed template)', () => {
    if (!smolLM2Available()) return;
    const tok = loadModelTokenizer(SMOLLM2_DIR);
    const tokens = (prompt?: string) => {
      const env = withPrompt(sweGrep, prompt ? { prompt } : {});
      return tok.encode(tok.render(firstPrompt(env, task, true), env.tools.map(toolSpec), true)).length;
    };
    // transformers' apply_chat_template of the same messages and tools (the trainer venv, SmolLM2's installed
    // template): 656 and 601 tokens. The TypeScript render here differs from it by one token in the worked
    // example's tool arguments, the same in both prompts.
    const [own, compact] = [tokens(), tokens('compact')];
    expect(own - compact).toBe(656 - 601);
    expect(Math.abs(own - 656)).toBeLessThanOrEqual(1);
  });

  test('an unknown variant names the field, the choices and the fix', () => {
    expect(() => withPrompt(sweGrep, { prompt: 'tiny' })).toThrow(/\[env\.args\] prompt = "tiny": environment "swe-grep" has no such prompt variant \(known: compact\)\. Fix: set prompt to one of "compact", or remove prompt/);
    expect(() => withPrompt(getEnvironment('debug'), { prompt: 'compact' })).toThrow(/"debug" has no such prompt variant \(it has none\)\. Fix: remove prompt/);
    expect(() => withPrompt(sweGrep, { prompt: 'constructor' })).toThrow(/no such prompt variant/);
  });

  test('ratchet check: the smoke config gets the compact tools; an unknown name is a failed line naming the field', async () => {
    const { config } = await loadRunConfig('configs/swe-grep/smoke.toml');
    expect(config.env[0]!.args.prompt).toBe('compact');
    const good = checkEnvironments(config);
    expect(good.envs[0]!.tools).toBe(sweGrep.prompts!.compact!.tools);
    config.env[0]!.args.prompt = 'tiny';
    const bad = checkEnvironments(config);
    expect(bad.envs[0]).toBeUndefined();
    expect(bad.lines.find((l) => l.level === 'fail')?.message).toMatch(/^env\.0\.args\.prompt: \[env\.args\] prompt = "tiny".*Fix:/);
  });
});
