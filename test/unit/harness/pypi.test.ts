/**
 * The real harnesses from PyPI (infra/harness-env.sh venvs), unchanged, driven through
 * src/harness/run.ts against a scripted fake vLLM and a host-directory sandbox, isolated in their
 * namespaces as in a run: their tool calls become commands in the sandbox, their requests turns.
 * Skips loudly where a venv is missing.
 */
import { existsSync } from 'node:fs';
import { runHarness } from '../../../src/harness/run';
import { miniSweAgent, nano } from '../../../src/envs/harnesses';
import { startFakeVllm, type FakeReply, type FakeVllm } from '../../helpers/fakeVllm';
import { FakeSandboxManager } from '../../helpers/rolloutFakes';

const call = (name: string, args: unknown, id: string) => ({ id, type: 'function' as const, function: { name, arguments: JSON.stringify(args) } });
const isolate = process.getuid?.() === 0;

describe.each([
  ['nano', nano, [
    { content: 'Look first.', tool_calls: [call('shell', { cmd: 'cat calc.py' }, 'c1')] },
    { content: 'Fix it.', tool_calls: [call('apply_patch', { file: 'calc.py', search: 'a - b', replace: 'a + b' }, 'c2')] },
    { content: 'Fixed add().' },
  ]],
  ['mini-swe-agent', miniSweAgent, [
    { content: 'Look first.', tool_calls: [call('bash', { command: 'cat calc.py' }, 'c1')] },
    { content: 'Fix it.', tool_calls: [call('bash', { command: "sed -i 's/a - b/a + b/' calc.py" }, 'c2')] },
    { content: 'Submit.', tool_calls: [call('bash', { command: 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT' }, 'c3')] },
  ]],
] as const)('%s from PyPI through the endpoint', (name, env, script) => {
  const python = env.harness!.command[0]!;
  const have = existsSync(python);
  let fake: FakeVllm;
  beforeAll(async () => {
    fake = await startFakeVllm((_b, n) => (script[n] ?? { content: 'done' }) as FakeReply);
  });
  afterAll(() => fake?.close());

  (have ? test : test.skip)('fixes the bug in the sandbox; every request is a recorded turn', async () => {
    const sandboxes = new FakeSandboxManager({ 'calc.py': 'def add(a, b):\n    return a - b\n' });
    const sandbox = await sandboxes.acquire({ labels: { run: 'r', step: 0, rollout: 'g-0' }, limits: {} as never });
    const result = await runHarness({
      spec: { ...env.harness!, isolate, timeout_s: 120 },
      upstream: fake.url, modelName: 'policy', policyVersion: 1,
      sampling: { temperature: 1, top_p: 1, max_tokens: 256 },
      limits: { max_turns: 10, max_tokens: 10_000, max_tool_calls: 10 },
      ctx: { sandbox, task: {} as never, state: {}, execTimeoutMs: 10_000 },
      instruction: 'add() subtracts', workdir: '/work/repo',
    });
    expect(result.error).toBeUndefined();
    expect(result.stop_reason).toBe('completed');
    expect(await sandbox.diff()).toContain('+    return a + b');
    expect(result.turns).toHaveLength(3);
    expect(fake.requests.every((r) => r.return_token_ids === true && r.model === 'policy')).toBe(true);
    expect(result.tools.map((t) => t.function.name).sort()).toEqual(name === 'nano' ? ['apply_patch', 'shell'] : ['bash']);
    await sandbox.release();
  }, 180_000);
  if (!have) test('skipped', () => { process.stderr.write(`SKIPPED: ${python} missing: run infra/harness-env.sh\n`); });
});
