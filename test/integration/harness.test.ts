/**
 * External harnesses and Harbor tasks on real parts: dockerd with the sandbox image, the stack's
 * vLLM (SmolLM2 on CPU), Nano from PyPI (infra/harness-env.sh). Short: one episode each.
 *  - Harbor: a task dir written here (instruction, a small repository, tests/test.sh) is loaded
 *    (its image built offline), run by the agent loop and scored by its own verifier; tasks that
 *    need a registry or the network fail with errors naming what is missing.
 *  - Tokens: through the endpoint in front of the real vLLM, the recorded ids are the ids vLLM
 *    returned to the harness, and the batch builder's masks cover exactly the completions.
 *  - Nano's commands run in the hardened sandbox: no network, read-only root, the exec timeout
 *    and output cap apply (the hostile-command checks of sandbox.test.ts, through the bridge).
 */
import { mkdtempSync, mkdirSync, writeFileSync, existsSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import pino from 'pino';
import type { SandboxConfig } from '../../src/config/schema';
import { harbor } from '../../src/envs/harbor';
import { nano } from '../../src/envs/harnesses';
import { REPO_DIR } from '../../src/sandbox/interface';
import { scoreRubric } from '../../src/envs/types';
import { runHarness } from '../../src/harness/run';
import { runEpisode } from '../../src/rollouts/episode';
import { assembleTrajectory, type CompleteTurn } from '../../src/samples/assemble';
import { loadModelTokenizer } from '../../src/samples/tokenizer';
import { defaultImage, SandboxManager } from '../../src/sandbox';
import { HarborTaskError, loadHarborTasks } from '../../src/tasks/harbor';
import { describeWithStack, REPO, STATE } from '../helpers/stack';
import { startFakeVllm, type FakeReply } from '../helpers/fakeVllm';
import { call, ScriptedModel } from '../helpers/rolloutFakes';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const MODEL_DIR = path.join(STATE, 'models', 'SmolLM2-135M-Instruct');
const log = pino({ level: process.env.RATCHET_LOG_LEVEL ?? 'silent' });
const limits: SandboxConfig = { memory_mb: 256, cpus: 1, pids_limit: 64, disk_mb: 64, exec_timeout_s: 5, output_limit_bytes: 4096, warm_pool_size: 0, max_lifetime_s: 600 };
const labels = { run: 'it-harness', step: 0, rollout: 'g-0' };
const noLive = { signal: undefined, progress: () => {}, heartbeat: () => {} } as never;

function writeHarborTask(root: string, name: string, dockerfile: string): string {
  const dir = path.join(root, name);
  mkdirSync(path.join(dir, 'environment', 'app'), { recursive: true });
  mkdirSync(path.join(dir, 'tests'), { recursive: true });
  writeFileSync(path.join(dir, 'task.toml'), 'version = "1.0"\n\n[metadata]\ndifficulty = "easy"\n\n[verifier]\ntimeout_sec = 60.0\n\n[agent]\ntimeout_sec = 120.0\n');
  writeFileSync(path.join(dir, 'instruction.md'), 'add() in /app/calc.py subtracts instead of adding. Fix it.\n');
  writeFileSync(path.join(dir, 'environment', 'Dockerfile'), dockerfile);
  writeFileSync(path.join(dir, 'environment', 'app', 'calc.py'), 'def add(a, b):\n    return a - b\n');
  writeFileSync(path.join(dir, 'tests', 'test.sh'), [
    '#!/bin/bash',
    'mkdir -p /logs/verifier',
    'if python3 -c "import sys; sys.path.insert(0, \'/app\'); import calc; assert calc.add(2, 3) == 5"; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi',
    '',
  ].join('\n'));
  return dir;
}

describeWithStack('external harnesses and Harbor tasks on real parts', ['docker'], () => {
  // The default worker id (host, pid, nonce): `host:pid` is shared by every suite of this jest process.
  const manager = new SandboxManager({ docker: new Docker(), log });
  const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-harbor-'));

  test('a Harbor task dir loads (image built offline), runs and is scored by its tests/test.sh', async () => {
    const dir = writeHarborTask(root, 'calc-add', `FROM ${defaultImage()}\nWORKDIR /app\nCOPY app/ /app/\n`);
    const [task] = await loadHarborTasks(dir);
    expect(task).toMatchObject({ instance_id: 'calc-add', source: { type: 'image' }, harbor: { verifier_timeout_s: 60, workdir: '/app' } });
    const input = {
      runId: 'it-harbor', step: 0, groupId: 'g', rolloutIndex: 0, envId: 'harbor', task: task!, taskSetDir: root, policyVersion: 0, modelName: 'm',
      sampling: { temperature: 1, top_p: 1, top_k: 0, max_tokens: 64 }, envArgs: { max_tokens: 1000, max_tool_calls: 5, max_turns: 5, few_shot: false },
      rubric: {}, sandbox: limits, inferenceBaseUrl: 'http://127.0.0.1:9/v1',
    } as never;
    const score = async (turns: ConstructorParameters<typeof ScriptedModel>[0]) => {
      const ep = await runEpisode({ input, env: harbor, sandboxes: manager, model: new ScriptedModel(turns), live: noLive, log });
      if ('setupError' in ep) throw new Error(ep.setupError);
      return { ep, s: scoreRubric(harbor.rubric, { task: task!, final: ep.final, answered: false, stop_reason: ep.result.stop_reason, stats: ep.result.stats, limits: { max_tokens: 1000, max_tool_calls: 5, max_turns: 5 } }) };
    };
    const fixed = await score([{ tool_calls: [call('apply_patch', { path: 'calc.py', search: 'a - b', replace: 'a + b' })] }, { content: 'done' }]);
    expect(fixed.ep.final).toMatchObject({ reward: 1, diff: expect.stringContaining('+    return a + b') });
    expect(fixed.s.components).toMatchObject({ reward: 1, verifier_wrote_reward: 1 });
    const unfixed = await score([{ content: 'nothing to do' }]);
    expect(unfixed.s.components).toMatchObject({ reward: 0, verifier_wrote_reward: 1 });
  }, 300_000);

  test('a Harbor task that needs a registry or the network is refused, naming what is missing', async () => {
    const missing = writeHarborTask(root, 'needs-registry', 'FROM python:3.13-slim\nWORKDIR /app\nCOPY app/ /app/\n');
    await expect(loadHarborTasks(missing)).rejects.toThrow(/builds FROM python:3\.13-slim, which is not on this host, and no image registry is reachable/);
    const net = writeHarborTask(root, 'needs-network', `FROM ${defaultImage()}\nUSER root\nRUN pip install requests==2.32.3\nWORKDIR /app\nCOPY app/ /app/\n`);
    await expect(loadHarborTasks(net)).rejects.toThrow(HarborTaskError);
    await expect(loadHarborTasks(net)).rejects.toThrow(/did not build offline/);
  }, 300_000);

  const nanoPython = nano.harness!.command[0]!;
  (existsSync(nanoPython) ? test : test.skip)('Nano\'s commands obey the sandbox: no network, read-only root, exec timeout, output cap', async () => {
    const cmds = ['python3 -c "import socket; socket.create_connection((\'1.1.1.1\', 80), timeout=2)"', 'touch /etc/owned', 'sleep 30', 'yes | head -c 100000'];
    const fake = await startFakeVllm((_b, n) => (n < cmds.length
      ? { content: '', tool_calls: [{ id: `c${n}`, type: 'function', function: { name: 'shell', arguments: JSON.stringify({ cmd: cmds[n] }) } }] }
      : n === cmds.length ? { content: '', tool_calls: [{ id: 'p', type: 'function', function: { name: 'apply_patch', arguments: JSON.stringify({ file: 'a.txt', search: 'x', replace: 'y' }) } }] }
        : { content: 'done' }) as FakeReply);
    const repo = path.join(root, 'repo.git');
    const { execFileSync } = await import('node:child_process');
    const work = path.join(root, 'work');
    mkdirSync(work);
    writeFileSync(path.join(work, 'a.txt'), 'x\n');
    const git = (...a: string[]) => execFileSync('git', ['-c', 'user.email=t@t', '-c', 'user.name=t', ...a], { cwd: work }).toString().trim();
    git('init', '-q'); git('add', '-A'); git('commit', '-qm', 'base');
    execFileSync('git', ['clone', '-q', '--bare', work, repo]);
    const sandbox = await manager.acquire({ labels, limits, repo: { hostPath: repo, baseCommit: git('rev-parse', 'HEAD') } });
    try {
      const result = await runHarness({
        spec: { ...nano.harness!, timeout_s: 180 }, upstream: fake.url, modelName: 'p', policyVersion: 0,
        sampling: { temperature: 1, top_p: 1, max_tokens: 256 }, limits: { max_turns: 10, max_tokens: 10_000, max_tool_calls: 10 },
        ctx: { sandbox, task: {} as never, state: {}, execTimeoutMs: limits.exec_timeout_s * 1000 }, instruction: 'probe', workdir: REPO_DIR,
      });
      expect(result.stop_reason).toBe('completed');
      const tool = result.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
      expect(tool[0]).toMatch(/Network is unreachable|OSError|Errno/);
      expect(tool[1]).toMatch(/Read-only file system|Permission denied/);
      expect(tool[2]).toMatch(/timed out|124|exit code/i);
      expect(tool[3]!.length).toBeLessThan(6000);
      expect(await sandbox.diff()).toContain('+y');
      // Nano's own bookkeeping (test -d .git, git status) runs in the sandbox too, and is counted.
      expect(result.stats.commands.filter((c) => !['test', 'git'].includes(c)).slice(0, 4)).toEqual(['python3', 'touch', 'sleep', 'yes']);
    } finally {
      await sandbox.release();
      await fake.close();
    }
  }, 300_000);
});

describeWithStack('the endpoint in front of the real vLLM', ['inference', 'model'], () => {
  test('recorded ids are the ids vLLM returned; masks cover exactly the completions', async () => {
    const models = (await (await fetch(`${INFERENCE}/models`)).json()) as { data: { id: string }[] };
    const script = path.join(REPO, 'test', 'fixtures', 'harness', 'fake_harness.py');
    const sandboxes = new (await import('../helpers/rolloutFakes')).FakeSandboxManager({ 'a.py': 'x = 1\n' });
    const sandbox = await sandboxes.acquire({ labels, limits });
    const result = await runHarness({
      spec: { name: 'recorder', command: ['/usr/bin/python3', script, path.join(REPO, 'harness')], timeout_s: 300, args: { mode: 'echo_ids', turns: 3 } },
      upstream: INFERENCE, modelName: models.data[0]!.id, policyVersion: 0,
      sampling: { temperature: 1, top_p: 1, top_k: 0, max_tokens: 24 }, limits: { max_turns: 5, max_tokens: 1000, max_tool_calls: 10 },
      ctx: { sandbox, task: {} as never, state: {}, execTimeoutMs: 10_000 }, instruction: 'Say hello, then count to three.', workdir: REPO_DIR,
    });
    await sandbox.release();
    expect(result.stop_reason).toBe('completed');
    const received = (result.answer as { ids: number[][] }).ids;
    expect(result.turns).toHaveLength(3);
    result.turns.forEach((t, i) => {
      expect(t.completion_token_ids).toEqual(received[i]);
      expect(t.completion_logprobs).toHaveLength(received[i]!.length);
      expect(t.prompt_token_ids!.length).toBeGreaterThan(0);
    });
    const tok = loadModelTokenizer(MODEL_DIR);
    const asm = assembleTrajectory(result.turns as CompleteTurn[], tok, 'split', 'it');
    const sampled = result.turns.reduce((n, t) => n + t.completion_token_ids!.length, 0);
    const masked = asm.segments.reduce((n, s) => n + s.mask.reduce((a, b) => a + b, 0), 0);
    // Every sampled token is trained on, and nothing else (each segment starts with prompt tokens).
    expect(masked).toBe(sampled);
    for (const s of asm.segments) {
      let k = 0;
      for (let turn = s.firstTurn; turn <= s.lastTurn; turn++) {
        const ids = result.turns[turn]!.completion_token_ids!;
        const at = s.ids.length === 0 ? -1 : findSub(s.ids, ids, k);
        expect(at).toBeGreaterThanOrEqual(0);
        expect(s.mask.slice(at, at + ids.length).every((m) => m === 1)).toBe(true);
        k = at + ids.length;
      }
    }
  }, 600_000);
});

function findSub(hay: number[], needle: number[], from: number): number {
  outer: for (let i = from; i + needle.length <= hay.length; i++) {
    for (let j = 0; j < needle.length; j++) if (hay[i + j] !== needle[j]) continue outer;
    return i;
  }
  return -1;
}
