/**
 * A real TrainRun on an environment that lives outside src/: the example
 * examples/envs/line-count, named by [[env]].module. Real Temporal, vLLM
 * (SmolLM2 on CPU), Docker sandboxes, the Python trainer and this repo's built
 * workers. 2 steps of 1 task x 2 rollouts; the run invariants of the fault tests hold.
 */
import { mkdtempSync, promises as fs, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { runChecks } from '../../src/check';
import { Trajectory } from '../../src/contracts/trajectory';
import { startTrainRun } from '../../src/workflows/client';
import { describeLong, REPO } from '../helpers/stack';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, workerCommands, type Proc } from '../helpers/trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';

// Two CPU training steps of about 5 minutes each: a long test (npm run test:long), out of CI's budget.
describeLong('TrainRun on an external environment (examples/envs/line-count)', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-extenv-'));
  const artifacts = path.join(dir, 'artifacts');
  const procs: Proc[] = [];
  let connection: Connection;
  let client: Client;
  let restoreStackWorkers: () => Promise<void> = async () => {};
  // The example's own smoke config, made smaller: 1 task x 2 rollouts a step, short turns.
  const config = path.join(dir, 'line-count.toml');
  writeFileSync(config, readFileSync(path.join(REPO, 'examples', 'envs', 'line-count', 'smoke.toml'), 'utf8')
    .replace(/^path = ".ratchet\/models/m, `path = "${process.env.RATCHET_HOME ?? path.join(REPO, '.ratchet')}/models`)
    .replace(/^batch_size = \d+/m, 'batch_size = 1')
    .replace(/^max_tokens = 96/m, 'max_tokens = 48')
    .replace(/^max_tool_calls = \d+/m, 'max_tool_calls = 2')
    .replace(/^max_turns = \d+/m, 'max_turns = 3'));

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    const cmds = workerCommands(artifacts);
    for (const c of [cmds.main(), cmds.rollout(), cmds.trainer()]) procs.push(startProc(c[0], c[1], [...c[2]], c[3], dir));
  });

  afterAll(async () => {
    for (const p of procs) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restoreStackWorkers();
  });

  test('ratchet check passes on it against the live stack', async () => {
    const report = await runChecks(config);
    expect(report.lines.filter((l) => l.level === 'fail')).toEqual([]);
    expect(report.lines.map((l) => l.section)).toEqual(expect.arrayContaining(['config', 'environments', 'datasets', 'model', 'host', 'stack']));
  }, 120_000);

  test('two steps train on it; every invariant holds; trajectories are the external environment\'s', async () => {
    const runId = `it-extenv-${Date.now()}`;
    const handle = await startTrainRun(client, config, { runId });
    const result = await handle.result();
    expect(result).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 2, inferenceUrl: INFERENCE });
    const step0 = path.join(artifacts, 'runs', runId, 'steps', '0', 'rollouts');
    const groups = await fs.readdir(step0);
    const t = Trajectory.parse(JSON.parse(await fs.readFile(path.join(step0, groups[0]!, '0.json'), 'utf8')));
    expect(t.env_id).toBe('line-count');
    expect(t.tools.map((x) => x.function.name)).toEqual(['bash', 'answer']);
    expect(Object.keys(t.reward!.components)).toEqual(['correct', 'closeness', 'answered', 'tool_calls']);
    // The stored config names the module by its resolved file, and the dataset beside it.
    const stored = JSON.parse(await fs.readFile(path.join(artifacts, 'runs', runId, 'config.json'), 'utf8')) as { env: { module: string; dataset: string }[] };
    expect(stored.env[0]!.module).toBe(path.join(REPO, 'examples', 'envs', 'line-count', 'index.js'));
    expect(stored.env[0]!.dataset).toBe(path.join(REPO, 'examples', 'envs', 'line-count', 'data', 'train.jsonl'));
  }, 1_500_000);
});
