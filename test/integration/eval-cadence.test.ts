/**
 * The in-run eval cadence on the real stack (issue 30): a tiny TrainRun with [eval] every_steps = 1 on
 * Temporal, vLLM (SmolLM2 on CPU), Docker sandboxes, the Python trainer and this repo's built workers.
 * Each step's checkpoint gets its own EvalSweep (named in the step record), run by the real plan,
 * rollout and record activities below training by priority; the run ends once its sweeps have, and
 * each sweep's result file names the sweep. Slow on 2 CPUs (minutes).
 */
import { existsSync, mkdtempSync, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection } from '@temporalio/client';
import { describeWithStack, REPO, STATE } from '../helpers/stack';
import { startTrainRun } from '../../src/workflows/client';
import { progressQuery } from '../../src/workflows/messages';
import { EvalResult, type EvalSweepResult } from '../../src/contracts/eval';
import { EVAL_PRIORITY } from '../../src/shared/fairness';
import { writeTaskSubset } from '../../src/tasks/subset';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from './trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const SOURCES = [path.join(STATE, 'tasks', 'heldout.jsonl'), path.join(REPO, 'taskgen', 'fixtures', 'sample_tasks.jsonl')];

describeWithStack('the in-run eval cadence on the real stack', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-evalcadence-'));
  const artifacts = path.join(dir, 'artifacts');
  const procs: Proc[] = [];
  let connection: Connection;
  let client: Client;
  let restoreStackWorkers: () => Promise<void> = async () => {};

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

  test('every_steps = 1 over 2 steps: a sweep of v1 and of v2, each named in its step record, each with its result', async () => {
    const source = SOURCES.find((f) => existsSync(f));
    if (!source) throw new Error('no held-out task set in .ratchet/tasks or taskgen/fixtures. Fix: bash infra/tasks.sh');
    const heldout = path.join(dir, 'heldout-2.jsonl');
    writeTaskSubset(source, 2, heldout);
    const config = await tinyConfig(dir, { asyncLevel: 0 });
    await fs.appendFile(config, `[eval]\nevery_steps = 1\ntaskset = "${heldout}"\nk = 1\nmax_concurrent = 2\n`);
    const runId = `it-evalcadence-${Date.now()}`;
    const handle = await startTrainRun(client, config, { runId });
    const result = await handle.result();
    expect(result).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    const records = await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 2, inferenceUrl: INFERENCE });

    expect(records.map((r) => r.eval_sweep?.workflow_id)).toEqual([`${runId}-step-0-eval`, `${runId}-step-1-eval`]);
    for (const r of records) {
      const sweep = r.eval_sweep!;
      expect(sweep).toMatchObject({ policy_version: r.policy_version, taskset: heldout, k: 1, every_steps: 1 });
      const h = client.workflow.getHandle(sweep.workflow_id);
      const res = await h.result() as EvalSweepResult;
      // Evaluated, or skipped only if something else evaluated the version on this task set first.
      expect([...res.evaluated.map((e) => e.version), ...res.skipped]).toEqual([r.policy_version]);
      const desc = await h.describe();
      expect(desc.raw.workflowExecutionInfo?.parentExecution?.workflowId).toBe(runId);
      expect(desc.raw.workflowExecutionInfo?.priority).toMatchObject({ priorityKey: EVAL_PRIORITY, fairnessKey: runId });
      const evalDir = path.join(artifacts, 'runs', runId, 'evals', String(r.policy_version));
      const files = (await fs.readdir(evalDir)).filter((f) => f.endsWith('.json'));
      expect(files).toHaveLength(1);
      const stored = EvalResult.parse(JSON.parse(await fs.readFile(path.join(evalDir, files[0]!), 'utf8')));
      expect(stored).toMatchObject({ run_id: runId, policy_version: r.policy_version, k: 1, episodes: 2, workflow_id: sweep.workflow_id });
    }
    // The run waited for its last sweep before it ended: the progress query has its outcome.
    const p = await handle.query(progressQuery);
    expect(p.lastEval).toMatchObject({ workflow_id: `${runId}-step-1-eval`, state: 'completed' });
  }, 2_400_000);
});
