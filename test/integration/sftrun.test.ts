/**
 * SftRun on the real stack (Temporal, vLLM with SmolLM2 on CPU, Docker sandboxes, the
 * Python trainer): demonstrations made by the scripted solver on real sandboxes, two SFT
 * steps, the trainer killed (-9) mid-step and started again, each step applied exactly once
 * (the run invariants: ledger and optimizer count), and the final adapter served by vLLM.
 * RATCHET_RECORD_HISTORIES=1 records its history for the replay test.
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { Client, Connection, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { describeWithStack, REPO } from '../helpers/stack';
import { recordHistory } from '../helpers/histories';
import { progressQuery } from '../../src/workflows/messages';
import type { SftRun } from '../../src/workflows/sftRun';
import type { Progress, TrainRunInput, TrainRunResult } from '../../src/contracts';
import { makeDemonstrations } from '../../src/sft/demos';
import { adapterName } from '../../src/shared/adapters';
import { SandboxManager } from '../../src/sandbox/manager';
import { loadTasks } from '../../src/tasks/load';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, workerCommands, type Proc } from './trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const TASKS = path.join(REPO, '.ratchet', 'tasks', 'train.jsonl');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

jest.setTimeout(1_200_000);

describeWithStack('SftRun on the real stack', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-sft-'));
  const artifacts = path.join(dir, 'artifacts');
  const cmds = workerCommands(artifacts);
  const workers: Record<'main' | 'trainer', Proc | undefined> = { main: undefined, trainer: undefined };
  let restoreStackWorkers: () => Promise<void> = async () => {};
  let connection: Connection;
  let client: Client;
  const start = (which: keyof typeof workers) => {
    const c = cmds[which]();
    workers[which] = startProc(c[0], c[1], [...c[2]], c[3], dir);
  };

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    start('main');
    start('trainer');
  });

  afterAll(async () => {
    for (const p of Object.values(workers)) if (p) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restoreStackWorkers();
  });

  async function waitFor(handle: WorkflowHandle<typeof SftRun>, what: string, pred: (p: Progress) => boolean, timeoutMs = 600_000): Promise<Progress> {
    const deadline = Date.now() + timeoutMs;
    let last: Progress | undefined;
    while (Date.now() < deadline) {
      try {
        last = await handle.query(progressQuery);
        if (pred(last)) return last;
      } catch { /* no worker right now */ }
      await sleep(500);
    }
    throw new Error(`timed out waiting for ${what}; last progress: ${JSON.stringify(last)}`);
  }

  async function result(handle: WorkflowHandle<typeof SftRun>): Promise<TrainRunResult> {
    for (;;) {
      try {
        return await handle.result();
      } catch (err) {
        if (err instanceof WorkflowFailedError) throw err;
        await sleep(2000);
      }
    }
  }

  test('demonstrations on real sandboxes, two SFT steps through a trainer kill -9, each applied once, the adapter served', async () => {
    // Demonstrations: the scripted solver on the first tasks of the training set, on real Docker sandboxes.
    const tasks = (await loadTasks(TASKS, { onInvalid: 'skip' })).tasks.slice(0, 4);
    const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
    const demos = await makeDemonstrations({ envId: 'swe-grep', tasks, taskSetDir: path.dirname(TASKS), sandboxes, minReward: 1 }).finally(() => sandboxes.close());
    expect(demos.kept.length).toBeGreaterThanOrEqual(1);
    expect(demos.kept.every((t) => t.turns.length >= 3 && t.messages.some((m) => m.role === 'tool'))).toBe(true);
    const data = path.join(dir, 'demos.jsonl');
    writeFileSync(data, demos.kept.map((t) => JSON.stringify(t)).join('\n') + '\n');

    const configPath = path.join(dir, 'sft.toml');
    writeFileSync(configPath, `name = "sft"
[trainer]
device = "cpu"
[trainer.optim]
lr = 1e-4
[orchestrator]
max_steps = 2
seq_len = 2048
[[env]]
id = "swe-grep"
[sft]
data = [${JSON.stringify(data)}]
batch_size = 2
`);
    const runId = `it-sft-${Date.now()}`;
    const input: TrainRunInput = { configPath, runId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } };
    const handle = await client.workflow.start<typeof SftRun>('SftRun', { taskQueue: 'ratchet', workflowId: runId, args: [input] });

    // Step 1, so the retried step must first load step 0's checkpoint on the new trainer.
    await waitFor(handle, 'step 1 training', (p) => p.step === 1 && p.phase === 'training');
    // Step 0's adapter is served by vLLM now (the run unloads its adapters when it ends).
    const models = await (await fetch(`${INFERENCE}/models`)).json() as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toContain(adapterName(runId, 1));
    await sleep(1500);
    await killProc(workers.trainer!, 'SIGKILL');
    await sleep(3000);
    start('trainer');

    const res = await result(handle);
    await recordHistory(handle, 'real-sftrun-trainer-killed');
    expect(res).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    // Each step applied once (ledger and optimizer count), every artifact intact, the final version served by vLLM.
    const records = await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 0, inferenceUrl: INFERENCE });
    expect(records.find((r) => r.step === 1)!.trainer.restarts).toBeGreaterThanOrEqual(1);
    for (const r of records) expect(Number((r.trainer as { nll?: number }).nll)).toBeGreaterThan(0);
    // The run's data was frozen into its store, every line naming its source.
    const frozen = readFileSync(path.join(artifacts, 'runs', runId, 'sft', 'data.jsonl'), 'utf8').trim().split('\n');
    expect(frozen.map((l) => (JSON.parse(l) as { where: string }).where)).toEqual(demos.kept.map((_, i) => `${data}:${i + 1}`));
  }, 1_200_000);
});
