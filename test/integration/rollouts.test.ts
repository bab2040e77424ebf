import { existsSync, mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import pino from 'pino';
import { createRolloutActivities } from '../../src/activities/rollout';
import type { RolloutInput } from '../../src/contracts/rollout';
import type { Completion, CompletionRequest, ModelClient } from '../../src/agent/model';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { Trajectory } from '../../src/contracts/trajectory';
import { LABELS, SandboxManager } from '../../src/sandbox';
import { loadTasks } from '../../src/tasks/load';
import type { Task } from '../../src/tasks/schema';
import { describeWithStack, REPO, STATE } from '../helpers/stack';

/**
 * Real rollouts: SmolLM2-135M on vLLM, hardened Docker sandboxes, tasks from the
 * generated set (or taskgen's fixtures). Short episodes: the point is the
 * plumbing end to end, not the weak model's score.
 */
const TASK_SETS = [path.join(STATE, 'tasks'), path.join(REPO, 'taskgen', 'fixtures')];
const taskSet = TASK_SETS.find((d) => existsSync(path.join(d, 'train.jsonl')) || existsSync(path.join(d, 'sample_tasks.jsonl')));
if (!taskSet) {
  const msg = 'rollout integration tests: no task set in .ratchet/tasks or taskgen/fixtures. Fix: bash infra/taskgen.sh (or the taskgen README)';
  if (process.env.RATCHET_REQUIRE_STACK === '1') throw new Error(msg);
  console.warn(`SKIPPING ${msg}`);
}
const taskFile = taskSet && (existsSync(path.join(taskSet, 'train.jsonl')) ? path.join(taskSet, 'train.jsonl') : path.join(taskSet, 'sample_tasks.jsonl'));
const describeRollouts = taskSet ? describeWithStack : (name: string, _needs: unknown, fn: () => void) => describe.skip(name, fn);

const log = pino({ level: process.env.RATCHET_LOG_LEVEL ?? 'silent' });
const RUN = `itest-rollouts-${process.pid}`;
const sandboxLimits = { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 128, exec_timeout_s: 10, output_limit_bytes: 8192, warm_pool_size: 0 };

function baseInput(envId: string, task: Task, over: Partial<RolloutInput> = {}): RolloutInput {
  return {
    runId: RUN, step: 0, groupId: `${envId}-g0`, rolloutIndex: 0, envId,
    task: { datasetPath: taskFile!, instanceId: task.instance_id }, taskSetDir: taskSet!,
    policyVersion: 0, modelName: 'smollm2-135m', sampling: { temperature: 1, top_p: 1, max_tokens: 100 },
    envArgs: { max_tokens: 200, max_tool_calls: 4, max_turns: 3 }, rubric: {},
    sandbox: sandboxLimits, inferenceBaseUrl: process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1', seed: 1, ...over,
  };
}

/** Plays hostile tool calls (one per turn), then stops: no vLLM involved. */
class HostileModel implements ModelClient {
  private turn = 0;
  constructor(private readonly commands: string[]) {}
  async complete(_req: CompletionRequest): Promise<Completion> {
    const command = this.commands[this.turn++];
    const ids = [1, 2, 3];
    return {
      content: command ? '' : 'done',
      tool_calls: command ? [{ id: `c${this.turn}`, type: 'function', function: { name: 'shell', arguments: JSON.stringify({ command }) } }] : [],
      finish_reason: command ? 'tool_calls' : 'stop',
      prompt_token_ids: ids, completion_token_ids: ids, completion_logprobs: [-1, -1, -1], prompt_tokens: 3, completion_tokens: 3,
    };
  }
}

describeRollouts('rollouts (SmolLM2 on vLLM, real sandboxes, real tasks)', ['docker', 'inference', 'model'], () => {
  const docker = new Docker();
  const sandboxes = new SandboxManager({ docker, log });
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-rollouts-')));
  let tasks: Task[] = [];

  beforeAll(async () => {
    tasks = (await loadTasks(taskFile!, { onInvalid: 'skip' })).tasks;
  });
  afterAll(async () => {
    await sandboxes.close();
  });

  async function leftovers(): Promise<number> {
    const list = await docker.listContainers({ all: true, filters: { label: [`${LABELS.run}=${RUN}`] } });
    return list.length;
  }

  test.each(['swe-grep', 'code-repair', 'debug'])('%s: a real rollout ends in a saved, valid trajectory with rewards', async (envId) => {
    const acts = createRolloutActivities({ store, sandboxes });
    const task = tasks[0]!;
    const summary = await acts.rollout(baseInput(envId, task));
    const t = Trajectory.parse(await store.getJson(summary.trajectory));
    expect(summary.trajectory.uri).toContain(`runs/${RUN}/steps/0/rollouts/${envId}-g0/0-${summary.trajectory.sha256.slice(0, 16)}.json`);
    expect(t.turns.length).toBeGreaterThan(0);
    for (const turn of t.turns) {
      expect(turn.prompt_token_ids!.length).toBeGreaterThan(0);
      expect(turn.completion_token_ids!.length).toBeGreaterThan(0);
      expect(turn.completion_logprobs).toHaveLength(turn.completion_token_ids!.length);
    }
    expect(t.stats.completion_tokens).toBeLessThanOrEqual(200);
    expect(Object.keys(summary.components).length).toBeGreaterThan(2);
    expect(Number.isFinite(summary.reward)).toBe(true);
    expect(t.stop_reason).not.toBe('error');
    expect(await leftovers()).toBe(0);
  });

  test('hostile tool calls are contained: the rollout ends with a penalty and the worker stays healthy', async () => {
    const hostile = [
      'python3 -c "import socket; s=socket.create_connection((\'1.1.1.1\', 80), timeout=3); print(\'EGRESS\')"',
      // The bomb backgrounds itself; the sleep keeps the exec (and its process
      // group) alive long enough for the bomb to reach the pids limit.
      ':(){ :|:& };:; sleep 2',
      'python3 -c "a = bytearray(2 * 1024**3); print(len(a))"',
      'dd if=/dev/zero of=/work/fill bs=1M count=1024; df -h /work',
      'yes',
      'sleep 600',
    ];
    const acts = createRolloutActivities({ store, sandboxes, openaiFactory: () => new HostileModel(hostile) });
    const started = Date.now();
    const summary = await acts.rollout(baseInput('code-repair', tasks[0]!, { envArgs: { max_tokens: 200, max_tool_calls: 10, max_turns: 10 }, groupId: 'hostile' }));
    const t = Trajectory.parse(await store.getJson(summary.trajectory));
    const outputs = t.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
    expect(outputs).toHaveLength(hostile.length);
    expect(outputs[0]).not.toContain('EGRESS');
    expect(outputs[1]).toMatch(/Resource temporarily unavailable|fork|timed out/); // the pids limit
    expect(outputs[2]).not.toContain(String(2 * 1024 ** 3)); // the memory limit: never allocated
    expect(outputs[3]).toMatch(/No space left|File size limit exceeded/); // the disk limit
    expect(outputs[4]).toMatch(/truncated|timed out/);
    expect(outputs[5]).toMatch(/timed out/);
    expect(summary.reward).toBeLessThanOrEqual(0);
    expect(['completed', 'error']).toContain(summary.stop_reason);
    expect(Date.now() - started).toBeLessThan(180_000);
    expect(await leftovers()).toBe(0);
    // The worker is healthy: the same activities run a normal rollout right after.
    const ok = createRolloutActivities({ store, sandboxes, openaiFactory: () => new HostileModel(['echo healthy']) });
    const after = await ok.rollout(baseInput('code-repair', tasks[0]!, { groupId: 'after-hostile' }));
    const t2 = Trajectory.parse(await store.getJson(after.trajectory));
    expect(t2.messages.find((m) => m.role === 'tool')?.content).toMatch(/healthy\n\[exit code 0\]/);
  });
});
