/**
 * The rollout activity (src/activities/rollout.ts) with fake sandboxes and scripted models.
 *
 * The "rollout errors: transient is retried, only what stays wrong is invalid input" block:
 * Which rollout errors are bad input and which are retried or waited for (issue 25, hole 2;
 * docs/errors.md): only input that stays wrong whatever the retry is InvalidRolloutTask.
 *
 * The "an external harness's failed episode" block:
 * An external harness's own failure (it crashed, gave no final answer, flooded its endpoint) is a
 * failed episode with its stop reason, never an infrastructure error: only a failure of the
 * infrastructure itself is retried and dropped (issue 29, "Bad input"). The built-in agent loop's
 * "error" means its sandbox call failed (a lost container), which is infrastructure; a harness's is not.
 * Found by the real mini-swe-agent eval sweep, where every episode became infra_error.
 */
import { mkdtempSync, writeFileSync, promises as fsp } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createRolloutActivities } from '../../../src/activities/rollout';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { ENVIRONMENTS } from '../../../src/envs/registry';
import type { Environment } from '../../../src/envs/types';
import { TaskSetupError } from '../../../src/tasks/setupError';
import { EVAL_STEP } from '../../../src/shared/steps';
import { isUnscored, Trajectory, type ChatMessage, type RolloutSummary } from '../../../src/contracts/trajectory';
import { OpenAIModelClient } from '../../../src/agent/model';
import { FAKE_END_OF_TURN, fakeEncode, fakePromptIds, startFakeVllm } from '../../helpers/fakeVllm';
import { CALC_FILES, call, FakeSandboxManager, ScriptedModel, type ScriptedTurn } from '../../helpers/rolloutFakes';
import { isTransientReadError } from '../../../src/rollouts/errors';
import { StoreUnavailableError } from '../../../src/artifacts/errors';
import type { AgentResult } from '../../../src/agent/loop';
import { runHarness } from '../../../src/harness/run';

// The "an external harness's failed episode" block gives runHarness a scripted outcome; every other test
// here runs the real one (the mock delegates to it until that block sets its own outcome, and after).
jest.mock('../../../src/harness/run', () => {
  const actual = jest.requireActual('../../../src/harness/run');
  return { ...actual, runHarness: jest.fn(actual.runHarness) };
});

// Some cases run real git, Python and retry back-offs in subprocesses: on a loaded 2-core CI
// machine they take more than jest's 5 s default (they are not timing tests).
jest.setTimeout(30_000);

const gold = 'diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n';
const task = {
  instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: gold,
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'],
  gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest', source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
};

function setup(turns: ScriptedTurn[]) {
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
  const sandboxes = new FakeSandboxManager(CALC_FILES);
  const model = new ScriptedModel(turns);
  const acts = createRolloutActivities({ store, sandboxes, openaiFactory: () => model });
  return { store, sandboxes, model, acts };
}

function input(envId: string, over: Partial<RolloutInput> = {}): RolloutInput {
  return {
    runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 1, envId, task, taskSetDir: '/tasks',
    policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
    sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
    inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7, ...over,
  };
}

async function trajectoryOf(store: LocalArtifactStore, ref: { uri: string; sha256: string; bytes: number }) {
  return Trajectory.parse(await store.getJson(ref));
}

/** A sandbox manager whose sandboxes die (every exec throws), as a lost container does. */
class LostContainerManager extends FakeSandboxManager {
  override async acquire(opts: Parameters<FakeSandboxManager['acquire']>[0]) {
    const sb = await super.acquire(opts);
    sb.exec = async () => { throw new Error('Error response from daemon: No such container: ratchet-sbx-1'); };
    return sb;
  }
}

describe('rollout activity: infrastructure failures are never rewards', () => {
  const turns = (): ScriptedTurn[] => [
    { tool_calls: [call('bash', { command: 'grep -rn "def add" pkg' })] },
    { tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] },
  ];
  function lostSetup() {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const model = new ScriptedModel(turns());
    const acts = createRolloutActivities({ store, sandboxes: new LostContainerManager(CALC_FILES), openaiFactory: () => model });
    return { store, acts };
  }

  test('a container lost mid-episode is retried (a retryable InfrastructureError), not scored', async () => {
    const { acts } = lostSetup();
    const env = new MockActivityEnvironment({ attempt: 1 });
    await expect(env.run(acts.rollout, input('swe-grep'))).rejects.toMatchObject({ type: 'InfrastructureError', nonRetryable: false });
  });

  test('on its last attempt it is recorded as infra_error with no reward, for the builder to drop', async () => {
    const { store, acts } = lostSetup();
    const env = new MockActivityEnvironment({ attempt: 3 });
    const summary: RolloutSummary = await env.run(acts.rollout, input('swe-grep'));
    expect(summary.stop_reason).toBe('infra_error');
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.stop_reason).toBe('infra_error');
    expect(t.error).toMatch(/sandbox failed mid-episode: .*No such container/);
  });

  test('Docker failing while scoring is an infrastructure failure, not "tests did not run"', async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    class ScoringFails extends FakeSandboxManager {
      override async acquire(opts: Parameters<FakeSandboxManager['acquire']>[0]) {
        if (this.acquired.length >= 1) throw new Error('docker: Cannot connect to the Docker daemon');
        return super.acquire(opts);
      }
    }
    const model = new ScriptedModel([
      { tool_calls: [call('apply_patch', { path: 'pkg/calc.py', search: 'def add(a, b):\n    return a - b', replace: 'def add(a, b):\n    return a + b' })] },
      { content: 'Fixed.' },
    ]);
    const acts = createRolloutActivities({ store, sandboxes: new ScoringFails(CALC_FILES), openaiFactory: () => model });
    await expect(new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input('code-repair')))
      .rejects.toMatchObject({ type: 'InfrastructureError' });
  });
});

describe('rollout activity: a container lost before finalize is an infrastructure failure, never a zero reward', () => {
  /** The agent's last turn goes well; the container dies before the environment reads the final answer. */
  function dyingSetup(docker: { read: string; probe: string }) {
    let lost = false;
    class DiesAfterTheEpisode extends FakeSandboxManager {
      override async acquire(opts: Parameters<FakeSandboxManager['acquire']>[0]) {
        const sb = await super.acquire(opts);
        const exec = sb.exec.bind(sb);
        sb.exec = async (cmd, o) => { if (lost) throw new Error(docker.probe); return exec(cmd, o); };
        const diff = sb.diff.bind(sb);
        sb.diff = async () => { if (lost) throw new Error(docker.read); return diff(); };
        return sb;
      }
    }
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const sandboxes = new DiesAfterTheEpisode(CALC_FILES);
    const model = new ScriptedModel([
      { tool_calls: [call('apply_patch', { path: 'pkg/calc.py', search: 'def add(a, b):\n    return a - b', replace: 'def add(a, b):\n    return a + b' })] },
      () => { lost = true; return { content: 'Fixed.' }; },
    ]);
    return { store, sandboxes, acts: createRolloutActivities({ store, sandboxes, openaiFactory: () => model }) };
  }
  const noSuchContainer = { read: '(HTTP code 404) no such container - No such container: ratchet-sbx-1', probe: '(HTTP code 404) no such container - No such container: ratchet-sbx-1' };

  test('Docker saying the container is gone while the answer is read: retried (InfrastructureError), not scored', async () => {
    const { acts, sandboxes } = dyingSetup(noSuchContainer);
    await expect(new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input('code-repair')))
      .rejects.toMatchObject({ type: 'InfrastructureError', nonRetryable: false });
    expect(sandboxes.acquired).toHaveLength(1); // no scoring test run
    expect(sandboxes.sandboxes.every((s) => s.released)).toBe(true);
  });

  test('a read that fails without saying why, with the container found dead by a probe, is the same', async () => {
    const { acts } = dyingSetup({ read: 'sandbox ratchet-sbx-1: diff(HEAD) exited with 137: ', probe: '(HTTP code 409) container stopped/paused - Container 3f1c is not running' });
    await expect(new MockActivityEnvironment({ attempt: 2 }).run(acts.rollout, input('code-repair')))
      .rejects.toMatchObject({ type: 'InfrastructureError', nonRetryable: false });
  });

  test('on the last attempt it is recorded as infra_error, which no group baseline sees', async () => {
    const { acts, store } = dyingSetup(noSuchContainer);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 3 }).run(acts.rollout, input('code-repair'));
    expect(summary.stop_reason).toBe('infra_error');
    expect(isUnscored(summary)).toBe(true);
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.stop_reason).toBe('infra_error');
    expect(t.error).toMatch(/sandbox was lost before the final answer was read: .*No such container/);
  });
});

describe('rollout activity: a task that cannot be set up is a dropped rollout, not a failed run', () => {
  const SETUP_ENV = 'swe-grep-setup-test';
  let setupError: Error = new Error('unset');
  const registry = ENVIRONMENTS as Record<string, Environment>;
  beforeAll(() => {
    registry[SETUP_ENV] = { ...ENVIRONMENTS['swe-grep'], id: SETUP_ENV, setup: async () => { throw setupError; } };
  });
  afterAll(() => { delete registry[SETUP_ENV]; });

  test('env.setup throwing: saved as setup_error with the error and zero reward; sandbox released, no model call', async () => {
    setupError = new Error('pip install failed: no matching distribution');
    const { store, sandboxes, model, acts } = setup([]);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input(SETUP_ENV));
    expect(summary).toMatchObject({ stop_reason: 'setup_error', reward: 0, task_id: 'calc-1', completion_tokens: 0 });
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.stop_reason).toBe('setup_error');
    expect(t.error).toMatch(/environment setup failed: pip install failed/);
    expect(t.reward?.total).toBe(0);
    expect(t.turns).toEqual([]);
    expect(model.requests).toHaveLength(0);
    expect(sandboxes.sandboxes[0]!.released).toBe(true);
  });

  test('env.setup failing because Docker is down is retried (InfrastructureError), then infra_error, never setup_error', async () => {
    setupError = new Error('Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?');
    const first = setup([]);
    await expect(new MockActivityEnvironment({ attempt: 1 }).run(first.acts.rollout, input(SETUP_ENV)))
      .rejects.toMatchObject({ type: 'InfrastructureError', nonRetryable: false });
    const last = setup([]);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 3 }).run(last.acts.rollout, input(SETUP_ENV));
    expect(summary.stop_reason).toBe('infra_error');
    expect((await trajectoryOf(last.store, summary.trajectory)).error).toMatch(/^the sandbox failed during setup: Cannot connect to the Docker daemon/);
  });

  test('a task id missing from its task file is setup_error; a task file that is not there is retried (TaskReadError)', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    writeFileSync(path.join(dir, 'tasks.jsonl'), `${JSON.stringify(task)}\n`);
    const { store, acts } = setup([]);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 })
      .run(acts.rollout, input('swe-grep', { taskSetDir: dir, task: { datasetPath: 'tasks.jsonl', instanceId: 'gone-7' } }));
    expect(summary).toMatchObject({ stop_reason: 'setup_error', task_id: 'gone-7', reward: 0 });
    expect((await trajectoryOf(store, summary.trajectory)).error).toMatch(/task "gone-7" is not in/);
    await expect(new MockActivityEnvironment({ attempt: 1 })
      .run(acts.rollout, input('swe-grep', { taskSetDir: dir, task: { datasetPath: 'nope.jsonl', instanceId: 'calc-1' } })))
      .rejects.toMatchObject({ type: 'TaskReadError', nonRetryable: false });
  });

  test('a snapshot that cannot be materialised is setup_error; dockerd unreachable at acquire still throws for Temporal to retry', async () => {
    class Acquire extends FakeSandboxManager {
      constructor(private readonly err: Error) { super(CALC_FILES); }
      override async acquire(): Promise<never> { throw this.err; }
    }
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const bad = createRolloutActivities({ store, sandboxes: new Acquire(new TaskSetupError('base commit abc is not in the snapshot /tasks/repos/calc.git')), openaiFactory: () => new ScriptedModel([]) });
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 }).run(bad.rollout, input('swe-grep'));
    expect(summary.stop_reason).toBe('setup_error');
    expect((await trajectoryOf(store, summary.trajectory)).error).toMatch(/not in the snapshot/);

    const down = createRolloutActivities({ store, sandboxes: new Acquire(new Error('cannot reach dockerd (ECONNREFUSED)')), openaiFactory: () => new ScriptedModel([]) });
    const err = await new MockActivityEnvironment({ attempt: 1 }).run(down.rollout, input('swe-grep')).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toMatch(/cannot reach dockerd/);
    expect((err as { nonRetryable?: boolean }).nonRetryable).not.toBe(true);
  });

  test('saving the trajectory on a full disk fails as DiskFull (non-retryable), for StepRollouts to wait on', async () => {
    const { store, acts } = setup([{ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }]);
    // The trajectory's write, not the turn journal's (a journal write that fails only ends the journal).
    const put = store.put.bind(store);
    jest.spyOn(store, 'put').mockImplementation((key, data) => (key.includes('.journal/') ? put(key, data)
      : Promise.reject(Object.assign(new Error('ENOSPC: no space left on device, write'), { code: 'ENOSPC', path: '/art/runs/run1/x.json.tmp-1' }))));
    await expect(new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input('swe-grep')))
      .rejects.toMatchObject({ type: 'DiskFull', nonRetryable: true, message: expect.stringMatching(/disk full writing \/art\/runs\/run1\/x\.json\.tmp-1/) });
  });

  test('a task with no source is setup_error', async () => {
    const { store, acts } = setup([]);
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input('swe-grep', { task: { ...task, source: undefined } }));
    expect(summary.stop_reason).toBe('setup_error');
    expect((await trajectoryOf(store, summary.trajectory)).error).toMatch(/has no source/);
  });
});

describe('rollout activity', () => {
  test('swe-grep: answer scored, trajectory saved at runs/<run>/steps/<step>/rollouts/<group>/<i>-<sha16>.json, sandbox released', async () => {
    const { store, sandboxes, acts, model } = setup([
      { tool_calls: [call('bash', { command: 'grep -rn "def add" pkg' })] },
      { tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] },
    ]);
    const env = new MockActivityEnvironment();
    const beats: unknown[] = [];
    env.on('heartbeat', (d: unknown) => beats.push(d));
    const summary: RolloutSummary = await env.run(acts.rollout, input('swe-grep'));
    expect(summary).toMatchObject({ task_id: 'calc-1', group_id: 'g0', rollout_index: 1, stop_reason: 'completed', policy_version: 1, tool_calls: 2 });
    expect(summary.components).toMatchObject({ correct_files: 1, completion_bonus: 1, file_f1: 1 });
    expect(summary.reward).toBeCloseTo(1.2);
    expect(summary.trajectory.uri).toMatch(new RegExp(`runs/run1/steps/2/rollouts/g0/1-${summary.trajectory.sha256.slice(0, 16)}\\.json$`));
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.messages[2]!.tool_calls![0]!.function.name).toBe('bash');
    expect(t.messages[3]!.content).toMatch(/pkg\/calc.py:1:def add/);
    expect(t.turns.every((turn) => turn.completion_token_ids!.length > 0 && turn.policy_version === 1)).toBe(true);
    expect(beats[0]).toEqual({ phase: 'started' }); // then on a timer (src/activities/liveness.ts), not per turn
    expect(sandboxes.acquired[0]).toMatchObject({ labels: { run: 'run1', step: 2, rollout: 'g0-1' }, repo: { hostPath: '/tasks/repos/calc.git', baseCommit: 'HEAD' } });
    expect(sandboxes.sandboxes.every((s) => s.released)).toBe(true);
    expect(model.requests[0]).toMatchObject({ model: 'policy-v1', sampling: { seed: 7, max_tokens: 64 } });
    expect(t.sampling).toEqual({ temperature: 1, top_p: 1, top_k: 0, tool_choice: 'auto', distribution_match: 'exact', history: 'tokens' });
  });

  test('required tool calls are an exact distribution: the call\'s opening is prompt (never sampled, never trained), the policy samples the rest', async () => {
    // The production client against a fake vLLM: what goes to the server and comes back is real.
    const fake = await startFakeVllm(() => ({ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }));
    try {
      const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
      const acts = createRolloutActivities({ store, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: (url) => new OpenAIModelClient(url, { timeoutMs: 5_000 }) });
      const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout,
        input('swe-grep', { inferenceBaseUrl: fake.url, sampling: { temperature: 0.8, top_p: 1, top_k: 0, max_tokens: 256, tool_choice: 'required' } }));
      expect(summary).toMatchObject({ stop_reason: 'completed', tool_calls: 1 });
      const t = await trajectoryOf(store, summary.trajectory);
      expect(t.sampling).toEqual({ temperature: 0.8, top_p: 1, top_k: 0, tool_choice: 'required', distribution_match: 'exact', history: 'tokens' });
      // No grammar asked of the server: the opening ends the prompt instead.
      expect(fake.requests).toHaveLength(1);
      expect(fake.requests[0]).not.toHaveProperty('tool_choice');
      expect(fake.requests[0]).not.toHaveProperty('guided_json');
      const opening = [...'<tool_call>\n'].map((c) => c.codePointAt(0)!);
      const turn = t.turns[0]!;
      expect(turn.prompt_token_ids).toEqual(fake.requests[0]!.prompt);
      expect(turn.prompt_token_ids!.slice(-opening.length)).toEqual(opening);
      expect(turn.prompt_token_ids!.slice(0, -opening.length)).toEqual(fakePromptIds(t.messages.slice(0, 2), t.tools));
      // The sampled ids (the trained ones) are the call's body and the end of turn, without the opening.
      const body = `{"name": "result", "arguments": ${JSON.stringify({ files: ['pkg/calc.py'], functions: ['add'] })}}\n</tool_call>`;
      expect(turn.completion_token_ids).toEqual([...fakeEncode(body), FAKE_END_OF_TURN]);
      expect(turn.completion_logprobs).toHaveLength(turn.completion_token_ids!.length);
      // The call is read from the opening and the sampled text together.
      expect(t.messages[2]!.tool_calls).toEqual([expect.objectContaining({ function: { name: 'result', arguments: JSON.stringify({ files: ['pkg/calc.py'], functions: ['add'] }) } })]);
      expect(summary.components).toMatchObject({ correct_files: 1 });
    } finally {
      await fake.close();
    }
  });

  test('required tool calls with top_p < 1 are still truncated: the forced opening does not hide the narrowed distribution', async () => {
    const { store, acts } = setup([{ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }]);
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout,
      input('swe-grep', { sampling: { temperature: 0.8, top_p: 0.95, top_k: 40, max_tokens: 64, tool_choice: 'required' } }));
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.sampling).toEqual({ temperature: 0.8, top_p: 0.95, top_k: 40, tool_choice: 'required', distribution_match: 'truncated', history: 'tokens' });
  });

  test.each([
    ['top_p < 1', { top_p: 0.95, top_k: 0 }],
    ['top_k > 0', { top_p: 1, top_k: 20 }],
  ])('with tool_choice = "auto", %s is recorded as a truncated distribution, never exact (the trainer does not truncate)', async (_name, trunc) => {
    const { store, acts } = setup([{ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }]);
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout,
      input('swe-grep', { sampling: { temperature: 0.8, ...trunc, max_tokens: 64, tool_choice: 'auto' } }));
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.sampling).toEqual({ temperature: 0.8, ...trunc, tool_choice: 'auto', distribution_match: 'truncated', history: 'tokens' });
  });

  test('an EvalSweep episode (step EVAL_STEP) runs like any other; its trajectory goes under runs/<run>/evals/', async () => {
    const { store, acts } = setup([
      { tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] },
    ]);
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout, input('swe-grep', { step: EVAL_STEP, groupId: 'eval-v1-calc-1' }));
    expect(summary.components).toMatchObject({ correct_files: 1 });
    expect(summary.trajectory.uri).toMatch(/runs\/run1\/evals\/trajectories\/eval-v1-calc-1\/1-[0-9a-f]{16}\.json$/);
    expect((await trajectoryOf(store, summary.trajectory)).step).toBe(EVAL_STEP);
  });

  test('code-repair: the diff is tested in a fresh sandbox and compared with the gold patch', async () => {
    const { store, sandboxes, acts } = setup([
      { tool_calls: [call('apply_patch', { path: 'pkg/calc.py', search: 'def add(a, b):\n    return a - b', replace: 'def add(a, b):\n    return a + b' })] },
      { content: 'Fixed.' },
    ]);
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout, input('code-repair'));
    expect(summary.components).toMatchObject({ diff_similarity: 1, tests_pass: 1, fail_to_pass: 1, pass_to_pass: 1 });
    expect(sandboxes.acquired).toHaveLength(2);
    const t = await trajectoryOf(store, summary.trajectory);
    expect(t.final.diff).toContain('+    return a + b');
    expect(t.final.tests).toMatchObject({ applied: true, ran: true });
  });

  test('debug: a rewrite that breaks PASS_TO_PASS scores zero', async () => {
    const { acts } = setup([
      { tool_calls: [call('rewrite', { path: 'pkg/calc.py', start: 1, end: 6, content: 'def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return 0' })] },
      { content: 'done' },
    ]);
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout, input('debug'));
    expect(summary.components).toMatchObject({ fail_to_pass: 0, pass_to_pass: 0 });
    expect(summary.reward).toBe(0);
  });

  test('an agent that destroys its repository gets a penalty (stop_reason error), not a crash', async () => {
    const { acts, store } = setup([{ tool_calls: [call('shell', { command: 'rm -rf .git' })] }, { content: 'oops' }]);
    const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout, input('code-repair'));
    expect(summary.stop_reason).toBe('error');
    expect(summary.reward).toBe(0);
    expect((await trajectoryOf(store, summary.trajectory)).error).toMatch(/reading the final answer failed/);
  });

  test('cancellation releases the sandbox and rethrows', async () => {
    const env = new MockActivityEnvironment();
    const { acts, sandboxes } = setup([() => { env.cancel(); return { tool_calls: [call('shell', { command: 'ls' })] }; }, { content: 'x' }]);
    await expect(env.run(acts.rollout, input('code-repair'))).rejects.toThrow();
    expect(sandboxes.sandboxes.length).toBeGreaterThan(0);
    expect(sandboxes.sandboxes.every((s) => s.released)).toBe(true);
  });

  test('few_shot puts the environment\'s worked example between the system prompt and the task; off by default', async () => {
    const prompts: ChatMessage[][] = [];
    const answer = (req: { messages: ChatMessage[] }) => { prompts.push([...req.messages]); return { content: 'done' }; };
    const { acts } = setup([answer, answer]);
    await acts.rollout(input('swe-grep', { groupId: 'plain' }));
    await acts.rollout(input('swe-grep', { groupId: 'demo', envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4, few_shot: true } }));
    const [plain, demo] = prompts;
    expect(plain!.map((m) => m.role)).toEqual(['system', 'user']);
    const demoLen = ENVIRONMENTS['swe-grep'].demonstration.length;
    expect(demo).toHaveLength(2 + demoLen);
    expect(demo!.slice(1, 1 + demoLen)).toEqual(ENVIRONMENTS['swe-grep'].demonstration);
    expect(demo![demo!.length - 1]).toEqual(plain![1]);
  });

  // External harnesses bring their own prompts: no demonstration.
  test.each(Object.values(ENVIRONMENTS).filter((e) => !e.harness).map((e) => [e.id, e] as const))('%s: the demonstration calls only its own tools, with valid arguments', (_id, env) => {
    const calls = env.demonstration.flatMap((m) => m.tool_calls ?? []);
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) {
      const tool = env.tools.find((t) => t.name === c.function.name);
      expect(tool).toBeDefined();
      expect(tool!.args.safeParse(JSON.parse(c.function.arguments)).success).toBe(true);
    }
    // Every call is answered, in order, like a real episode.
    const ids = env.demonstration.filter((m) => m.role === 'tool').map((m) => m.tool_call_id);
    expect(ids).toEqual(calls.map((c) => c.id));
  });

  test('bad input names the field', async () => {
    const { acts } = setup([]);
    await expect(acts.rollout({ ...input('swe-grep'), step: -2 })).rejects.toThrow(/invalid rollout input: step/);
    await expect(acts.rollout(input('nope'))).rejects.toThrow(/unknown environment "nope"/);
  });
});

describe('rollout errors: transient is retried, only what stays wrong is invalid input', () => {
  const task = {
    instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
    FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: [], gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest',
    source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
  };

  function setup() {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const model = new ScriptedModel([{ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }]);
    const acts = createRolloutActivities({ store, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: () => model });
    return { store, acts };
  }

  function input(over: Partial<RolloutInput> = {}): RolloutInput {
    return {
      runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 1, envId: 'swe-grep', task, taskSetDir: '/tasks',
      policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
      envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
      sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
      inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7, ...over,
    };
  }

  const run = (acts: ReturnType<typeof setup>['acts'], i: RolloutInput): Promise<RolloutSummary> => new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, i);

  afterEach(() => jest.restoreAllMocks());

  test('a task-file read failing with EMFILE or EIO is retried (TaskReadError), and the retry goes through', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    writeFileSync(path.join(dir, 'tasks.jsonl'), `${JSON.stringify(task)}\n`);
    const ref = { taskSetDir: dir, task: { datasetPath: 'tasks.jsonl', instanceId: 'calc-1' } };
    const { acts } = setup();
    for (const code of ['EMFILE', 'EIO']) {
      jest.spyOn(fsp, 'stat').mockRejectedValueOnce(Object.assign(new Error(`${code}: failed, stat '${dir}/tasks.jsonl'`), { code }));
      await expect(run(acts, input(ref))).rejects.toMatchObject({ type: 'TaskReadError', nonRetryable: false });
    }
    expect((await run(acts, input(ref))).task_id).toBe('calc-1');
  });

  test('a task file missing on this host is retried; once it is there the rollout runs', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    const ref = { taskSetDir: dir, task: { datasetPath: 'tasks.jsonl', instanceId: 'calc-1' } };
    const { acts } = setup();
    await expect(run(acts, input(ref))).rejects.toMatchObject({ type: 'TaskReadError', nonRetryable: false });
    writeFileSync(path.join(dir, 'tasks.jsonl'), `${JSON.stringify(task)}\n`);
    expect((await run(acts, input(ref))).task_id).toBe('calc-1');
  });

  test('a task file that stays wrong (an extension no reader knows) is InvalidRolloutTask', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    writeFileSync(path.join(dir, 'tasks.csv'), 'x\n');
    const { acts } = setup();
    await expect(run(acts, input({ taskSetDir: dir, task: { datasetPath: 'tasks.csv', instanceId: 'calc-1' } })))
      .rejects.toMatchObject({ type: 'InvalidRolloutTask', nonRetryable: true });
  });

  test('the run config unreadable from a store that is down is StoreUnavailable (the step waits), not invalid input', async () => {
    const { store, acts } = setup();
    jest.spyOn(store, 'exists').mockRejectedValueOnce(new StoreUnavailableError('s3://bucket/p', 'connect ECONNREFUSED'));
    await expect(run(acts, input())).rejects.toMatchObject({ type: 'StoreUnavailable', nonRetryable: true });
    // The next try reads it (the failed read was not cached).
    expect((await run(acts, input())).task_id).toBe('calc-1');
  });

  test('an unknown environment stays wrong on every retry: InvalidRolloutTask', async () => {
    const { acts } = setup();
    await expect(run(acts, input({ envId: 'no-such-env' }))).rejects.toMatchObject({ type: 'InvalidRolloutTask', nonRetryable: true });
  });

  test('the trajectory write finding the store down fails as StoreUnavailable (the step waits; no attempt used)', async () => {
    const { store, acts } = setup();
    // The trajectory's write, not the turn journal's (a journal write that fails only ends the journal).
    const put = store.put.bind(store);
    jest.spyOn(store, 'put').mockImplementation((key, data) => (key.includes('.journal/') ? put(key, data) : Promise.reject(new StoreUnavailableError('s3://bucket/p', 'HTTP 503'))));
    await expect(run(acts, input())).rejects.toMatchObject({ type: 'StoreUnavailable', nonRetryable: true });
  });

  test('isTransientReadError: errno codes and the Parquet reader\'s text', () => {
    expect(isTransientReadError(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBe(true);
    expect(isTransientReadError(Object.assign(new Error('x'), { code: 'EISDIR' }))).toBe(false);
    expect(isTransientReadError(new Error('cannot read Parquet task file /t.parquet: Error: EIO: i/o error, read'))).toBe(true);
    expect(isTransientReadError(new Error('task file /t.csv has extension ".csv"; use .jsonl or .parquet'))).toBe(false);
  });
});

describe("an external harness's failed episode", () => {
  beforeEach(() => {
    // The harness process itself is tested with real namespaces in test/unit/harness/run.test.ts; here only
    // what the episode makes of its outcome matters.
    // An AgentResult without the harness's `tools`, as the block has always scripted it.
    jest.mocked(runHarness).mockImplementation((async (): Promise<AgentResult> => ({
      messages: [{ role: 'user', content: 'fix it' }],
      turns: [],
      stop_reason: 'error',
      error: 'harness mini-swe-agent exited without a final answer (no RATCHET_FINAL line): RepeatedFormatError',
      stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
      model_ms: 1,
      tools_ms: 0,
    })) as unknown as typeof runHarness);
  });
  afterEach(() => {
    jest.mocked(runHarness).mockImplementation(jest.requireActual('../../../src/harness/run').runHarness);
  });

  const task = {
    instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1',
    patch: 'diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n',
    FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'],
    gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest', source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
  };

  test("a harness that ends without a final answer is a scored, failed episode with its stop reason, not an infrastructure error", async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
    const acts = createRolloutActivities({ store, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: () => new ScriptedModel([]) });
    const input: RolloutInput = {
      runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 0, envId: 'mini-swe-agent', task, taskSetDir: '/tasks',
      policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
      envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
      sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
      inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7,
    };
    // Attempt 1 of 4: an infrastructure failure would throw here (to be retried); a failed episode returns.
    const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input);
    expect(summary.stop_reason).toBe('error');
    expect(summary.reward).toBe(0);
    const t = Trajectory.parse(await store.getJson(summary.trajectory));
    expect(t.stop_reason).toBe('error');
    expect(t.error).toMatch(/exited without a final answer/);
  });
});
