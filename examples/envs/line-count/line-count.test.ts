/**
 * The example environment's own tests: it loads and validates as any
 * environment from a module does, its rewards score as documented, and the
 * shared rollout activity runs it end to end (scripted model, a host-dir sandbox).
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createRolloutActivities } from '../../../src/activities/rollout';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { main } from '../../../src/cli/index';
import { EXIT } from '../../../src/cli/exit';
import { loadEnvironment, probeEnvironment } from '../../../src/envs/load';
import { scoreRubric, type ScoreInput } from '../../../src/envs/types';
import type { RolloutSummary } from '../../../src/contracts/trajectory';
import { Task } from '../../../src/tasks/schema';
import { loadTasks } from '../../../src/tasks/load';
import { call, FakeSandboxManager, ScriptedModel } from '../../../test/helpers/rolloutFakes';
import { QWEN3_DIR } from '../../../test/fixtures/samples/simulate';

jest.setTimeout(60_000);

const MODULE = './examples/envs/line-count';
const DATA = path.join(__dirname, 'data', 'train.jsonl');

test('loads through [[env]].module and passes validation and the probe on its own dataset', async () => {
  const env = loadEnvironment({ id: 'line-count', module: MODULE });
  expect(env.tools.map((t) => t.name)).toEqual(['bash', 'answer']);
  expect(env.rubric.map((r) => r.name)).toEqual(['correct', 'closeness', 'answered', 'tool_calls']);
  expect(env.needsRepository).toBe(false);
  const { tasks } = await loadTasks(DATA);
  expect(tasks.length).toBeGreaterThanOrEqual(10);
  for (const t of tasks) expect(() => probeEnvironment(env, t, MODULE)).not.toThrow();
});

test('rewards: exact count, partial credit by distance, answering, tool calls reported only', async () => {
  const env = loadEnvironment({ id: 'line-count', module: MODULE });
  const task = Task.parse({ ...JSON.parse(readFileSync(DATA, 'utf8').split('\n')[0]!), expected_lines: 6 });
  const score = (final: Record<string, unknown>, answered: boolean) => scoreRubric(env.rubric, {
    task, final, answered, stop_reason: 'completed', limits: { max_tokens: 1, max_tool_calls: 1, max_turns: 1 },
    stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 2, tool_errors: 0, commands: [], tools_used: {} },
  } satisfies ScoreInput);
  expect(score({ lines: 6 }, true)).toMatchObject({ total: 1 + 0.3 + 0.1, components: { correct: 1, closeness: 1, answered: 1, tool_calls: 2 } });
  expect(score({ lines: 4 }, true).components).toMatchObject({ correct: 0, closeness: 1 / 3 });
  expect(score({}, false).total).toBe(0);
});

test('the shared rollout activity runs it: setup writes the files, bash sees them, the answer is scored', async () => {
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
  // The rollout worker learns the module from the run's stored config, as in a real run.
  await store.putJson('runs/ex1/config.json', {
    env: [{ id: 'line-count', module: path.resolve(__dirname, 'index.js'), dataset: DATA }],
  });
  const sandboxes = new FakeSandboxManager({ '.keep': '' }); // the fake needs one file to commit
  const row = JSON.parse(readFileSync(DATA, 'utf8').split('\n')[0]!) as { files: Record<string, string>; expected_lines: number; problem_statement: string };
  const target = /does (\S+) have/.exec(row.problem_statement)![1]!;
  let seen = '';
  const model = new ScriptedModel([
    { tool_calls: [call('bash', { command: `wc -l ${target}` })] },
    (req) => {
      seen = String(req.messages[req.messages.length - 1]!.content);
      return { tool_calls: [call('answer', { lines: row.expected_lines })] };
    },
  ]);
  const acts = createRolloutActivities({ store, sandboxes, openaiFactory: () => model });
  const input: RolloutInput = {
    runId: 'ex1', step: 0, groupId: 'g0', rolloutIndex: 0, envId: 'line-count', task: { datasetPath: DATA, instanceId: 'line-count-0' },
    taskSetDir: '/nonexistent', policyVersion: 0, modelName: 'm', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
    sandbox: { memory_mb: 256, cpus: 1, pids_limit: 128, disk_mb: 64, exec_timeout_s: 10, output_limit_bytes: 4096, warm_pool_size: 0 },
    inferenceBaseUrl: 'http://127.0.0.1:8000/v1',
  };
  const summary: RolloutSummary = await new MockActivityEnvironment().run(acts.rollout, input);
  expect(seen).toMatch(new RegExp(`^${row.expected_lines} ${target.replace('.', '\\.')}`));
  expect(summary).toMatchObject({ stop_reason: 'completed', components: { correct: 1, answered: 1 } });
  expect(summary.reward).toBeCloseTo(1.4);
  // No repository for this environment: the sandbox was acquired without one.
  expect(sandboxes.acquired[0]!.repo).toBeUndefined();
});

test('ratchet check passes on its smoke config (offline; the Qwen3 tokenizer standing in for the model)', async () => {
  const cfg = readFileSync(path.join(__dirname, 'smoke.toml'), 'utf8').replace(/^path = .*$/m, `path = ${JSON.stringify(QWEN3_DIR)}`);
  const file = path.join(mkdtempSync(path.join(os.tmpdir(), 'ratchet-ex-')), 'smoke.toml');
  writeFileSync(file, cfg);
  const lines: string[] = [];
  jest.spyOn(console, 'log').mockImplementation((...a) => { lines.push(a.join(' ')); });
  jest.spyOn(console, 'error').mockImplementation((...a) => { lines.push(a.join(' ')); });
  try {
    expect(await main(['check', file, '--offline'])).toBe(EXIT.ok);
  } finally {
    jest.restoreAllMocks();
  }
  expect(lines.join('\n')).toMatch(/env\.0 "line-count" \(.*examples\/envs\/line-count\/index\.js\): 2 tools, 4 rewards/);
});
