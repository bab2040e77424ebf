import { z } from 'zod';
import { programName, runAgent, ToolError, type AgentRunInput } from '../../../src/agent/loop';
import { defineTool, toolSpec, zodToJsonSchema } from '../../../src/agent/tool';
import { Task } from '../../../src/tasks/schema';
import { call, HostDirSandbox, makeRepo, ScriptedModel, type ScriptedTurn } from '../../helpers/rolloutFakes';

const task = Task.parse({
  instance_id: 't1', repo: 'demo', base_commit: 'HEAD', problem_statement: 'bug', patch: '', FAIL_TO_PASS: ['t::a'],
});

const echo = defineTool({
  name: 'echo',
  description: 'echo text',
  args: z.object({ text: z.string(), times: z.number().int().positive().optional() }),
  async run({ text, times }) {
    return { content: text.repeat(times ?? 1), command: `echo ${text}` };
  },
});
const answer = defineTool({
  name: 'answer',
  description: 'final',
  args: z.object({ files: z.array(z.string()) }),
  async run({ files }) {
    return { content: 'ok', answer: { files } };
  },
});
const picky = defineTool({
  name: 'picky',
  description: 'always a model error',
  args: z.object({}),
  async run() {
    throw new ToolError('that file does not exist');
  },
});
const broken = defineTool({
  name: 'broken',
  description: 'the sandbox died',
  args: z.object({}),
  async run() {
    throw new Error('container is gone');
  },
});

function input(turns: ScriptedTurn[], over: Partial<AgentRunInput> = {}): AgentRunInput & { model: ScriptedModel } {
  const { root, commit } = makeRepo({ 'a.txt': 'x\n' });
  return {
    model: new ScriptedModel(turns),
    modelName: 'm',
    policyVersion: 3,
    messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'u' }],
    tools: [echo, answer, picky, broken],
    limits: { max_tokens: 1000, max_tool_calls: 10, max_turns: 10 },
    sampling: { temperature: 1, top_p: 1, max_tokens: 100 },
    ctx: { sandbox: new HostDirSandbox(root, commit), task, state: {}, execTimeoutMs: 5000 },
    ...over,
  } as AgentRunInput & { model: ScriptedModel };
}

describe('runAgent', () => {
  test('plain text with no tool call ends the episode as completed without an answer', async () => {
    const r = await runAgent(input([{ content: 'The bug is somewhere.' }]));
    expect(r.stop_reason).toBe('completed');
    expect(r.answer).toBeUndefined();
    expect(r.turns).toHaveLength(1);
    expect(r.turns[0]).toMatchObject({ prompt_message_count: 2, policy_version: 3, finish_reason: 'stop' });
    expect(r.turns[0]!.completion_token_ids).toHaveLength(5);
    expect(r.messages.at(-1)).toMatchObject({ role: 'assistant', content: 'The bug is somewhere.' });
  });

  test('parallel tool calls run in order and each gets its answer; an answer tool ends the episode', async () => {
    const hb: number[] = [];
    const r = await runAgent(input([
      { tool_calls: [call('echo', { text: 'hi' }, 'c1'), call('echo', { text: 'yo', times: 2 }, 'c2')] },
      { tool_calls: [call('answer', { files: ['a.py'] }, 'c3')] },
    ], { heartbeat: (i) => hb.push(i.turn) }));
    expect(r.stop_reason).toBe('completed');
    expect(r.answer).toEqual({ files: ['a.py'] });
    expect(r.messages.filter((m) => m.role === 'tool').map((m) => [m.tool_call_id, m.content])).toEqual([['c1', 'hi'], ['c2', 'yoyo'], ['c3', 'ok']]);
    expect(r.turns.map((t) => t.prompt_message_count)).toEqual([2, 5]);
    expect(hb).toEqual([1, 2]);
    expect(r.stats).toMatchObject({ tool_calls: 3, tool_errors: 0, commands: ['echo', 'echo'], tools_used: { echo: 2, answer: 1 } });
  });

  test.each([
    ['bad JSON', call('echo', '{"text": ', 'c1'), /not valid JSON/],
    ['unknown tool', call('nope', {}, 'c1'), /unknown tool "nope".*echo, answer/],
    ['missing argument', call('echo', {}, 'c1'), /invalid arguments for echo: "text": Required/],
    ['wrong type', call('echo', { text: 'a', times: -1 }, 'c1'), /"times": Number must be greater than 0/],
    ['ToolError', call('picky', {}, 'c1'), /Error: that file does not exist/],
  ])('a malformed tool call (%s) goes back to the model as an error', async (_name, bad, pattern) => {
    const r = await runAgent(input([{ tool_calls: [bad] }, { content: 'giving up' }]));
    expect(r.stop_reason).toBe('completed');
    const reply = r.messages.find((m) => m.role === 'tool');
    expect(reply?.content).toMatch(pattern);
    expect(r.stats.tool_errors).toBe(1);
    expect(r.turns).toHaveLength(2);
  });

  test('a sandbox failure inside a tool ends the episode with stop_reason error, not a throw', async () => {
    const r = await runAgent(input([{ tool_calls: [call('broken', {})] }]));
    expect(r.stop_reason).toBe('error');
    expect(r.error).toMatch(/container is gone/);
  });

  test('max_tool_calls stops before running the call over the limit', async () => {
    const r = await runAgent(input([
      { tool_calls: [call('echo', { text: '1' }), call('echo', { text: '2' }), call('echo', { text: '3' })] },
    ], { limits: { max_tokens: 1000, max_tool_calls: 2, max_turns: 10 } }));
    expect(r.stop_reason).toBe('max_tool_calls');
    expect(r.stats.tool_calls).toBe(2);
  });

  test('max_tokens counts completion tokens over the episode and caps each turn by what is left', async () => {
    const turns: ScriptedTurn[] = Array.from({ length: 5 }, () => ({ tool_calls: [call('echo', { text: 'x' })], completion_tokens: 40 }));
    const inp = input(turns, { limits: { max_tokens: 100, max_tool_calls: 50, max_turns: 50 } });
    const r = await runAgent(inp);
    expect(r.stop_reason).toBe('max_tokens');
    expect(r.stats.completion_tokens).toBe(120);
    expect(inp.model.requests.map((q) => q.sampling.max_tokens)).toEqual([100, 60, 20]);
  });

  test('max_turns', async () => {
    const turns: ScriptedTurn[] = Array.from({ length: 5 }, () => ({ tool_calls: [call('echo', { text: 'x' })] }));
    const r = await runAgent(input(turns, { limits: { max_tokens: 1000, max_tool_calls: 50, max_turns: 2 } }));
    expect(r.stop_reason).toBe('max_turns');
    expect(r.turns).toHaveLength(2);
  });

  test('an aborted signal stops the loop', async () => {
    const ctl = new AbortController();
    ctl.abort();
    await expect(runAgent(input([{ content: 'x' }], { signal: ctl.signal }))).rejects.toThrow();
  });
});

describe('tool schemas', () => {
  test('zod args become JSON schema with required keys and descriptions', () => {
    expect(zodToJsonSchema(z.object({ a: z.string().describe('A'), b: z.array(z.number().int()).optional() }))).toEqual({
      type: 'object', properties: { a: { type: 'string', description: 'A' }, b: { type: 'array', items: { type: 'integer' } } }, required: ['a'],
    });
    expect(toolSpec(echo).function.name).toBe('echo');
  });
});

describe('per-turn seeds', () => {
  test('each turn of a seeded episode asks for its own seed', async () => {
    const inp = input([
      { tool_calls: [call('echo', { text: 'a' })] },
      { tool_calls: [call('echo', { text: 'b' })] },
      { tool_calls: [call('answer', { files: [] })] },
    ], { sampling: { temperature: 1, top_p: 1, max_tokens: 100, seed: 42 } });
    await runAgent(inp);
    const seeds = inp.model.requests.map((r) => r.sampling.seed);
    expect(seeds).toHaveLength(3);
    expect(new Set(seeds).size).toBe(3);
    expect(seeds.every((x) => Number.isInteger(x))).toBe(true);
  });
});

describe('programName', () => {
  it.each([
    ['rg -n "def add" --type py', 'rg'],
    ['  /usr/bin/grep -r x .', 'grep'],
    ['pytest;pytest-pytest-tools', 'pytest'],
    ['pytest&&pytest -x', 'pytest'],
    ['pytest|head', 'pytest'],
    ['cd /work/repo&&pytest', 'cd'],
    ['(cd a; ls)', 'cd'],
    ['$(which pytest) -q', 'which'],
    ['PYTHONPATH=src FOO=1 python -m pytest', 'python'],
    ['"pytest" -q', 'pytest'],
    ['pytest\u200bpytest-tools', 'pytest'],
    ['', ''],
  ])('%j -> %j', (command, name) => {
    expect(programName(command)).toBe(name);
  });
});

test('a command written without spaces counts as its first program, not as names run together', async () => {
  const shell = defineTool({
    name: 'bash',
    description: 'a shell',
    args: z.object({ command: z.string() }),
    async run({ command }) {
      return { content: '', command };
    },
  });
  const { root, commit } = makeRepo({ 'a.txt': 'x\n' });
  const task = Task.parse({ instance_id: 't1', repo: 'demo', base_commit: 'HEAD', problem_statement: 'bug', patch: '', FAIL_TO_PASS: ['t::a'] });
  const r = await runAgent({
    model: new ScriptedModel([{ tool_calls: [call('bash', { command: 'pytest;pytest-pytest-tools' }, 'c1'), call('bash', { command: 'pytest -x' }, 'c2')] }, { content: 'done' }]),
    modelName: 'm',
    policyVersion: 0,
    messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'u' }],
    tools: [shell],
    limits: { max_tokens: 1000, max_tool_calls: 10, max_turns: 10 },
    sampling: { temperature: 1, top_p: 1, max_tokens: 100 },
    ctx: { sandbox: new HostDirSandbox(root, commit), task, state: {}, execTimeoutMs: 5000 },
  } as AgentRunInput);
  expect(r.stats.commands).toEqual(['pytest', 'pytest']);
});
