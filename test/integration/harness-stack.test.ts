/**
 * External harnesses in real runs: the rollout activity, SmolLM2 on the stack's vLLM, hardened
 * Docker sandboxes, the harnesses from PyPI (infra/harness-env.sh), isolated as in production.
 *  - mini-swe-agent: an EvalSweep of the base policy over 2 held-out tasks (a dev server of its own).
 *  - Nano: a TrainRun of 2 steps on the code-repair tasks through the endpoint (long: npm run test:long).
 * Every rollout's trajectory carries the endpoint's recorded ids, and the harness's own tools.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, promises as fs, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import { Client, Connection } from '@temporalio/client';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { createEvalActivities } from '../../src/activities/eval';
import { createRolloutActivities } from '../../src/activities/rollout';
import { LocalArtifactStore, uriToPath } from '../../src/artifacts/store';
import { RunConfig } from '../../src/config/schema';
import type { RolloutSummary } from '../../src/contracts';
import { EvalResult, type EvalSweepResult } from '../../src/contracts/eval';
import { Trajectory } from '../../src/contracts/trajectory';
import { miniSweAgent, nano } from '../../src/envs/harnesses';
import { SandboxManager } from '../../src/sandbox';
import { logger } from '../../src/shared/logger';
import { writeTaskSubset } from '../../src/tasks/subset';
import { startTrainRun } from '../../src/workflows/client';
import { describeLong, describeWithStack, REPO, STATE, TEMPORAL_BIN } from '../helpers/stack';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, workerCommands, type Proc } from '../helpers/trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const HELDOUT = path.join(STATE, 'tasks', 'heldout.jsonl');
const have = (p: string) => existsSync(p);
const missing = [[miniSweAgent.harness!.command[0]!, 'bash infra/harness-env.sh'], [nano.harness!.command[0]!, 'bash infra/harness-env.sh'], [HELDOUT, 'bash infra/tasks.sh']].filter(([p]) => !have(p!));
if (missing.length > 0) {
  const msg = `external harness runs: missing ${missing.map(([p, fix]) => `${p} (fix: ${fix})`).join(', ')}`;
  if (process.env.RATCHET_REQUIRE_STACK === '1') throw new Error(msg);
  console.warn(`SKIPPING ${msg}`);
}
const describeReal = missing.length === 0 ? describeWithStack : (name: string, _n: unknown, fn: () => void) => describe.skip(name, fn);
const describeRealLong = missing.length === 0 ? describeLong : (name: string, _n: unknown, fn: () => void) => describe.skip(name, fn);

function expectHarnessTrajectory(t: Trajectory, tools: string[]): void {
  expect(t.tools.map((x) => x.function.name).sort()).toEqual(tools);
  // An episode that reached the model has turns with the server's ids, one logprob per sampled id.
  for (const turn of t.turns) {
    expect(turn.completion_token_ids!.length).toBeGreaterThan(0);
    expect(turn.completion_logprobs).toHaveLength(turn.completion_token_ids!.length);
    expect(turn.prompt_token_ids!.length).toBeGreaterThan(0);
  }
  if (t.stop_reason === 'error') expect(t.error).toMatch(/harness mini-swe-agent|harness nano/);
}

describeReal('mini-swe-agent: an eval sweep over real rollouts', ['temporalBinary', 'docker', 'inference', 'model'], () => {
  const RUN = `itest-mswea-eval-${process.pid}`;
  let env: TestWorkflowEnvironment;
  let store: LocalArtifactStore;
  let sandboxes: SandboxManager;

  beforeAll(async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'ratchet-mswea-'));
    process.env.RATCHET_ARTIFACTS = path.join(root, 'artifacts');
    process.env.RATCHET_TASKS = path.join(root, 'tasks');
    mkdirSync(process.env.RATCHET_TASKS, { recursive: true });
    writeTaskSubset(HELDOUT, 2, path.join(process.env.RATCHET_TASKS, 'heldout.jsonl'));
    store = new LocalArtifactStore(process.env.RATCHET_ARTIFACTS);
    sandboxes = new SandboxManager({ docker: new Docker(), log: logger });
    await store.putJson(`runs/${RUN}/config.json`, RunConfig.parse({
      env: [{ id: 'mini-swe-agent', args: { max_tokens: 400, max_tool_calls: 3, max_turns: 3, harness_timeout_s: 240 } }],
      sampling: { max_tokens: 64 },
      sandbox: { warm_pool_size: 0 },
      inference: { base_urls: [INFERENCE] },
    }));
    env = await TestWorkflowEnvironment.createLocal({ server: { executable: { type: 'existing-path', path: TEMPORAL_BIN } } });
  }, 120_000);

  afterAll(async () => {
    await env?.teardown();
    await sandboxes?.close();
    delete process.env.RATCHET_ARTIFACTS;
    delete process.env.RATCHET_TASKS;
  });

  it('every episode runs through the endpoint, ends with a stop reason, and is stored with its recorded tokens', async () => {
    const main = await Worker.create({ connection: env.nativeConnection, taskQueue: 'ratchet', workflowsPath: require.resolve('../../src/workflows/evalSweep'), activities: createEvalActivities({ store, logger }) });
    const rollouts = await Worker.create({ connection: env.nativeConnection, taskQueue: 'ratchet-rollout', activities: createRolloutActivities({ store, sandboxes }) });
    const res = await main.runUntil(rollouts.runUntil(env.client.workflow.execute('EvalSweep', {
      taskQueue: 'ratchet', workflowId: `eval-${RUN}`, args: [{ runId: RUN, versions: [0], taskset: 'heldout', k: 1, maxConcurrent: 2 }],
    }))) as EvalSweepResult;
    const result = EvalResult.parse(JSON.parse(readFileSync(store.localPath(res.evaluated[0]!.key), 'utf8')));
    expect(result.episodes).toBe(2);
    expect(result.errors).toBe(0); // no infrastructure errors: a harness's own failures are scored episodes
    const dir = store.localPath(`runs/${RUN}/evals/trajectories`);
    const files = readdirSync(dir, { recursive: true }).map(String).filter((f) => f.endsWith('.json') && !f.includes('.journal/'));
    expect(files).toHaveLength(2);
    for (const f of files) {
      const t = Trajectory.parse(JSON.parse(readFileSync(path.join(dir, f), 'utf8')));
      expect(t.env_id).toBe('mini-swe-agent');
      expect(t.turns.length).toBeGreaterThan(0);
      expectHarnessTrajectory(t, ['bash']);
    }
  }, 900_000);
});

// Two CPU training steps of several minutes each: a long test (npm run test:long), out of CI's budget.
describeRealLong('Nano trains 2 steps on code-repair tasks through the endpoint', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-nano-train-'));
  const artifacts = path.join(dir, 'artifacts');
  const procs: Proc[] = [];
  let connection: Connection;
  let client: Client;
  let restore: () => Promise<void> = async () => {};
  const config = path.join(dir, 'nano.toml');
  writeFileSync(config, readFileSync(path.join(REPO, 'configs', 'nano', 'smoke.toml'), 'utf8')
    .replace(/^path = ".ratchet\/models/m, `path = "${STATE}/models`)
    .replace(/^batch_size = \d+/m, 'batch_size = 1')
    .replace(/^rollouts_per_example = \d+/m, 'rollouts_per_example = 2')
    .replace(/^max_tokens = 512/m, 'max_tokens = 192')
    .replace(/^max_tool_calls = \d+/m, 'max_tool_calls = 3')
    .replace(/^max_turns = \d+/m, 'max_turns = 3'));

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restore = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    const cmds = workerCommands(artifacts);
    for (const c of [cmds.main(), cmds.rollout(), cmds.trainer()]) procs.push(startProc(c[0], c[1], [...c[2]], c[3], dir));
  });

  afterAll(async () => {
    for (const p of procs) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restore();
  });

  test('two steps; every invariant holds; trajectories are Nano\'s, with the endpoint\'s tokens', async () => {
    const runId = `it-nano-${Date.now()}`;
    const result = await (await startTrainRun(client, config, { runId })).result();
    expect(result).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 2, inferenceUrl: INFERENCE });
    const step1 = path.join(artifacts, 'runs', runId, 'steps', '1', 'rollouts');
    // The step's summaries name the trajectory each rollout's winning attempt stored (not a directory listing).
    const [first] = JSON.parse(await fs.readFile(path.join(step1, 'summaries.json'), 'utf8')) as RolloutSummary[];
    const t = Trajectory.parse(JSON.parse(await fs.readFile(uriToPath(first!.trajectory.uri), 'utf8')));
    expect(t.env_id).toBe('nano');
    expectHarnessTrajectory(t, ['apply_patch', 'shell']);
    // Step 1's rollouts were sampled by the adapter after step 0.
    expect(t.turns.every((x) => x.policy_version >= 0)).toBe(true);
  }, 1_800_000);
});
