import { z } from 'zod';
import { programName, runAgent, type AgentRunInput } from '../../src/agent/loop';
import { defineTool } from '../../src/agent/tool';
import { Task } from '../../src/tasks/schema';
import { call, HostDirSandbox, makeRepo, ScriptedModel } from '../helpers/rolloutFakes';

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
