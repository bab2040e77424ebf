/**
 * Sample efficiency settings on the real stack (issue 38, item 3): a TrainRun of SmolLM2 on CPU with
 * online difficulty filtering, pass-rate pools and limit-ended masking on. Whatever the model scores,
 * each step either had an informative group in its first round or ran exactly one refill round (its own
 * StepRollouts child, its own summary keys); the batch holds only informative groups; the step record
 * names the rounds, the policy version that sampled them and the pool the next step samples from.
 */
import { existsSync, mkdtempSync, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describeWithStack } from '../helpers/stack';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { readRunState, readStepRecords } from '../../src/records/runRecords';
import { startTrainRun } from '../../src/workflows/client';
import type { TaskPool } from '../../src/samples/taskPool';
import { distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from '../helpers/trainrunStack';

describeWithStack('difficulty filtering and pass-rate pools on the real stack', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-filter-'));
  const artifacts = path.join(dir, 'artifacts');
  const procs: Proc[] = [];
  let connection: Connection;
  let client: Client;
  let restoreStackWorkers: () => Promise<void> = async () => {};

  beforeAll(async () => {
    if (!distBuilt()) throw new Error('dist/workers is missing: run npm run build first');
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

  test('two steps: at most one refill round each, a batch of informative groups only, the pool carried to the next step', async () => {
    const config = await tinyConfig(dir, {
      name: 'filter', asyncLevel: 0, orchestrator: 'limit_ended = "mask"',
      tables: '[orchestrator.difficulty_filter]\nenabled = true\nmax_refill_rounds = 1\n[orchestrator.pass_rate_pool]\nenabled = true\npass_reward = 0.5',
    });
    const runId = `it-filter-${Date.now()}`;
    const handle = await startTrainRun(client, config, { runId });
    expect(await handle.result()).toMatchObject({ stepsCompleted: 2, stopped: 'completed' });
    const store = new LocalArtifactStore(artifacts);
    const records = await readStepRecords(store, runId);
    expect(records.map((r) => r.step)).toEqual([0, 1]);
    for (const r of records) {
      const rounds = r.refill!.rounds;
      expect(r.refill!.target).toBe(1);
      // A refill round only when the first had no informative group, and at most max_refill_rounds of them.
      expect(rounds.length).toBe(rounds[0]!.informative_groups >= 1 ? 1 : 2);
      expect(rounds.map((x) => x.groups)).toEqual(rounds.map(() => 1));
      expect(r.rollouts).toBe(2 * rounds.length);
      expect(r.informative_groups).toBe(rounds.reduce((a, x) => a + x.informative_groups, 0));
      expect(r.sampling_policy_version).toBe(rounds[0]!.policy_version);
      const rolloutsDir = path.join(artifacts, 'runs', runId, 'steps', String(r.step), 'rollouts');
      if (rounds.length === 2) {
        const child = await client.workflow.getHandle(`${runId}-step-${r.step}-rollouts-r1`).describe();
        expect(child.status.name).toBe('COMPLETED');
        expect((await fs.readdir(rolloutsDir)).some((f) => f.startsWith('summaries-r1'))).toBe(true);
      }
      if (r.informative_groups === 0) {
        expect(r.error?.type).toBe('EmptyBatch');
      } else {
        // The batch is the informative group's rollouts only.
        const manifest = JSON.parse(await fs.readFile(path.join(artifacts, 'runs', runId, 'steps', String(r.step), 'batch.json'), 'utf8')) as { groups: number; uniform_groups: number; informative_groups: number };
        expect(manifest).toMatchObject({ groups: 1, uniform_groups: 0, informative_groups: 1 });
      }
      // The pool counts every rollout of the step that has a score.
      const pool = JSON.parse(await fs.readFile(new URL(r.task_pool!.pool.uri), 'utf8')) as TaskPool;
      expect(pool.step).toBe(r.step);
      expect(r.task_pool!.tasks).toBe(Object.keys(pool.tasks).length);
    }
    expect((await readRunState(store, runId))?.taskPool?.uri).toBe(records[1]!.task_pool!.pool.uri);
    expect(existsSync(path.join(artifacts, 'runs', runId, 'task-pool'))).toBe(true);
  }, 900_000);
});
