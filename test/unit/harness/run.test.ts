/**
 * src/harness/run.ts with a scripted harness process (test/fixtures/harness/fake_harness.py), a fake
 * vLLM and a host-directory sandbox: the episode it records, and every way a harness can go wrong
 * ending as a failed episode with a stop reason. The isolation test uses real namespaces (root).
 *
 * The "the real harnesses from PyPI" block:
 * The real harnesses from PyPI (infra/harness-env.sh venvs), unchanged, driven through
 * src/harness/run.ts against a scripted fake vLLM and a host-directory sandbox, isolated in their
 * namespaces as in a run: their tool calls become commands in the sandbox, their requests turns.
 * Skips loudly where a venv is missing.
 */
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { startEndpoint } from '../../../src/endpoint/server';
import { runHarness, type HarnessRunInput } from '../../../src/harness/run';
import { REPO } from '../../helpers/stack';
import { startFakeVllm, type FakeVllm, type FakeReply } from '../../helpers/fakeVllm';
import { FakeSandboxManager, type HostDirSandbox } from '../../helpers/rolloutFakes';
import { miniSweAgent, nano } from '../../../src/envs/harnesses';

const PY = '/usr/bin/python3';
const SCRIPT = path.join(REPO, 'test', 'fixtures', 'harness', 'fake_harness.py');
const HARNESS_DIR = path.join(REPO, 'harness');
const canIsolate = process.getuid?.() === 0 && existsSync('/usr/bin/unshare') && existsSync('/usr/bin/setpriv');

describe('runHarness', () => {
  let fake: FakeVllm;
  const sandboxes = new FakeSandboxManager({ 'a.py': 'x = 1\n' });
  beforeAll(async () => {
    fake = await startFakeVllm(() => ({ content: 'thinking' }));
  });
  afterAll(async () => {
    await fake.close();
    for (const s of sandboxes.sandboxes) await s.release();
  });

  async function run(mode: string, o: Partial<HarnessRunInput> & { isolate?: boolean; args?: Record<string, unknown> } = {}) {
    const sandbox = (await sandboxes.acquire({ labels: { run: 'r', step: 0, rollout: 'g-0' }, limits: {} as never })) as HostDirSandbox;
    const result = await runHarness({
      spec: { name: 'fake', command: [PY, SCRIPT, HARNESS_DIR], timeout_s: o.spec?.timeout_s ?? 20, isolate: o.isolate ?? false, args: { mode, ...o.args } },
      upstream: fake.url, modelName: 'm', policyVersion: 2,
      sampling: { temperature: 1, top_p: 1, max_tokens: 50 },
      limits: o.limits ?? { max_turns: 10, max_tokens: 1000, max_tool_calls: 10 },
      ctx: { sandbox, task: {} as never, state: {}, execTimeoutMs: 10_000 },
      instruction: 'fix it', workdir: '/work/repo',
    });
    return { result, sandbox };
  }

  test('records the harness\'s requests as turns and its commands in the sandbox; its final answer ends the episode', async () => {
    const { result, sandbox } = await run('ok');
    expect(result.stop_reason).toBe('completed');
    expect(result.answer).toEqual({ note: 'done', ls: ['a.py', 'fix.txt'] });
    expect(result.turns).toHaveLength(2);
    expect(result.turns.every((t) => t.policy_version === 2 && (t.completion_token_ids?.length ?? 0) > 0)).toBe(true);
    expect(result.stats.commands).toEqual(['echo']);
    expect(await sandbox.readFile('/work/repo/fix.txt')).toBe('fixed\n');
    expect(result.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
  }, 30_000);

  test('a crash is a failed episode naming the exit and stderr', async () => {
    const { result } = await run('crash');
    expect(result.stop_reason).toBe('error');
    expect(result.error).toMatch(/crashed \(exit 3\).*boom: harness bug/);
    expect(result.turns).toHaveLength(1);
  }, 30_000);

  test('a hang is killed at its time limit', async () => {
    const t = Date.now();
    const { result } = await run('hang', { spec: { name: 'fake', command: [], timeout_s: 2 } });
    expect(result.stop_reason).toBe('error');
    expect(result.error).toMatch(/ran past its 2s time limit and was killed/);
    expect(Date.now() - t).toBeLessThan(10_000);
  }, 30_000);

  test('no final answer is a failed episode', async () => {
    const { result } = await run('no_final');
    expect(result).toMatchObject({ stop_reason: 'error', error: expect.stringMatching(/without a final answer/) });
  }, 30_000);

  test('a harness that floods the endpoint ends at the rollout\'s request limit', async () => {
    const { result } = await run('flood', { limits: { max_turns: 3, max_tokens: 100_000, max_tool_calls: 10 } });
    expect(result.stop_reason).toBe('max_turns');
    expect(result.turns).toHaveLength(3);
  }, 30_000);

  test('cannot use another rollout\'s endpoint: its own key is refused there', async () => {
    const { mkdtempSync } = await import('node:fs');
    const os = await import('node:os');
    const other = await startEndpoint({ upstream: fake.url, modelName: 'm', policyVersion: 0, sampling: { temperature: 1, top_p: 1, max_tokens: 5 },
      limits: { max_turns: 5, max_tokens: 100, max_tool_calls: 5 }, socketPath: path.join(mkdtempSync(path.join(os.tmpdir(), 'other-')), 'endpoint.sock'),
      routes: { exec: async () => ({ exit_code: 0, stdout: 'OTHER SANDBOX', stderr: '' }) } });
    try {
      const { result } = await run('other_endpoint', { args: { other_socket: other.socketPath } });
      expect(result.answer).toMatchObject({ other: expect.stringMatching(/^refused: exec: 401/) });
    } finally {
      await other.close();
    }
  }, 30_000);

  (canIsolate ? test : test.skip)('isolated: its own endpoint only (not a host TCP port, not another rollout\'s socket), its own processes and user', async () => {
    const { mkdtempSync, writeFileSync, chmodSync } = await import('node:fs');
    const os = await import('node:os');
    const port = Number(new URL(fake.url).port);
    const secretDir = mkdtempSync(path.join(os.tmpdir(), 'secret-'));
    chmodSync(secretDir, 0o755);
    const rootOnly = path.join(secretDir, 'root-only.txt');
    writeFileSync(rootOnly, 'secret', { mode: 0o600 });
    // Another rollout's endpoint, as runHarness would make it: its socket in a 0700 directory owned by another harness user.
    const otherDir = mkdtempSync(path.join(os.tmpdir(), 'other-rollout-'));
    const other = await startEndpoint({ upstream: fake.url, modelName: 'm', policyVersion: 0, sampling: { temperature: 1, top_p: 1, max_tokens: 5 },
      limits: { max_turns: 5, max_tokens: 100, max_tool_calls: 5 }, socketPath: path.join(otherDir, 'endpoint.sock') });
    const { chown } = await import('node:fs/promises');
    await chown(otherDir, 2_999_999, 2_999_999);
    try {
      const { result } = await run('probe', { isolate: true, args: { host_port: port, root_only: rootOnly, other_socket: other.socketPath } });
      expect(result.stop_reason).toBe('completed');
      expect(result.answer).toMatchObject({
        endpoint: 'reached',
        host_port: expect.stringMatching(/^unreachable/),
        root_only: expect.stringMatching(/^refused: PermissionError/),
        other_socket: expect.stringMatching(/^refused: PermissionError/),
        uid: expect.any(Number),
      });
      expect(result.answer?.uid).toBeGreaterThanOrEqual(2_000_000);
      expect(result.answer?.pid1).not.toMatch(/systemd|init|node/);
    } finally {
      await other.close();
    }
  }, 30_000);
  if (!canIsolate) {
    test('isolation test skipped', () => {
      process.stderr.write('SKIPPED: harness isolation needs root with unshare and setpriv (util-linux)\n');
    });
  }
});

describe('the real harnesses from PyPI', () => {
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
});
