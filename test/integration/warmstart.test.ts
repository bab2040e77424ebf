/**
 * The warm start on the real stack (Temporal, vLLM with SmolLM2 on CPU, Docker sandboxes, the
 * Python trainer): an SftRun of one step on demonstrations made by the scripted solver, then a
 * TrainRun with [model] init_from = that run. The TrainRun's trainer starts from the SFT adapter
 * (a fresh ledger: its own step 0), vLLM serves that adapter as <run>/policy-v0 for the first
 * rollouts, the step trains once, and its lineage names the origin by sha256. An init_from naming
 * a step the SFT run does not have fails the run before anything starts, naming the key.
 * RATCHET_RECORD_HISTORIES=1 records the TrainRun's history for the replay test.
 */
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { Client, Connection, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { describeWithStack, REPO, STATE } from '../helpers/stack';
import { recordHistory } from '../helpers/histories';
import { progressQuery } from '../../src/workflows/messages';
import type { TrainRun } from '../../src/workflows/trainRun';
import type { Progress, StepRecord, TrainRunInput } from '../../src/contracts';
import { makeDemonstrations } from '../../src/sft/demos';
import { adapterName } from '../../src/shared/adapters';
import { SandboxManager } from '../../src/sandbox/manager';
import { loadTasks } from '../../src/tasks/load';
import { writeTaskSubset } from '../../src/tasks/subset';
import type { EvalSweepResult } from '../../src/contracts/eval';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, workerCommands, type Proc } from './trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const TASKS = path.join(STATE, 'tasks', 'train.jsonl');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

jest.setTimeout(1_500_000);

describeWithStack('warm start on the real stack: SftRun, then a TrainRun from its adapter', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-warmstart-'));
  const artifacts = path.join(dir, 'artifacts');
  const cmds = workerCommands(artifacts);
  const procs: Proc[] = [];
  let restoreStackWorkers: () => Promise<void> = async () => {};
  let connection: Connection;
  let client: Client;

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    for (const c of [cmds.main(), cmds.rollout(), cmds.trainer()]) procs.push(startProc(c[0], c[1], [...c[2]], c[3], dir));
  });

  afterAll(async () => {
    for (const p of procs) await killProc(p, 'SIGTERM');
    await connection?.close();
    await restoreStackWorkers();
  });

  async function waitFor(handle: WorkflowHandle, what: string, pred: (p: Progress) => boolean, timeoutMs = 900_000): Promise<Progress> {
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

  const records = (runId: string): StepRecord[] => {
    const d = path.join(artifacts, 'runs', runId, 'records', 'steps');
    return readdirSync(d).map((f) => JSON.parse(readFileSync(path.join(d, f), 'utf8')) as StepRecord).sort((a, b) => a.step - b.step);
  };

  test('one SFT step; a TrainRun init_from it starts from its adapter (served as policy-v0), trains one step, lineage names it', async () => {
    const tasks = (await loadTasks(TASKS, { onInvalid: 'skip' })).tasks.slice(0, 2);
    const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
    const demos = await makeDemonstrations({ envId: 'swe-grep', tasks, taskSetDir: path.dirname(TASKS), sandboxes, minReward: 1 }).finally(() => sandboxes.close());
    expect(demos.kept.length).toBeGreaterThanOrEqual(1);
    const data = path.join(dir, 'demos.jsonl');
    writeFileSync(data, demos.kept.map((t) => JSON.stringify(t)).join('\n') + '\n');

    // The SFT run: one step, a large learning rate so its adapter differs visibly from a fresh one.
    const sftConfig = path.join(dir, 'sft.toml');
    writeFileSync(sftConfig, `name = "sft"\n[trainer]\ndevice = "cpu"\n[trainer.optim]\nlr = 1e-3\n[orchestrator]\nmax_steps = 1\nseq_len = 2048\n` +
      `[[env]]\nid = "swe-grep"\n[sft]\ndata = [${JSON.stringify(data)}]\nbatch_size = 2\n`);
    const sftId = `it-warm-sft-${Date.now()}`;
    const sftInput: TrainRunInput = { configPath: sftConfig, runId: sftId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } };
    const sft = await client.workflow.execute('SftRun', { taskQueue: 'ratchet', workflowId: sftId, args: [sftInput] });
    expect(sft).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
    const sftRecord = records(sftId)[0]!;
    expect(sftRecord.adapter).toBeDefined();

    // The TrainRun from it.
    const rlConfig = (from: string) => {
      const f = path.join(dir, `rl-${from.replace(/[^a-z0-9]/gi, '_')}.toml`);
      writeFileSync(f, `name = "rl"\n[model]\ninit_from = "${from}"\n[trainer]\ndevice = "cpu"\n[sampling]\nmax_tokens = 32\n` +
        `[orchestrator]\nbatch_size = 1\nrollouts_per_example = 2\nmax_steps = 1\nasync_level = 0\nmax_concurrent_rollouts = 2\n` +
        `[[env]]\nid = "swe-grep"\n[env.args]\nmax_tokens = 256\nmax_tool_calls = 3\nmax_turns = 3\n`);
      return f;
    };
    const rlId = `it-warm-rl-${Date.now()}`;
    const rl = await client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: rlId,
      args: [{ configPath: rlConfig(sftId), runId: rlId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } }],
    });
    // While step 0's rollouts run, vLLM serves version 0 from the SFT run's adapter directory.
    await waitFor(rl, 'step 0 rollouts', (p) => p.step === 0 && p.phase === 'rollouts');
    const served = await (await fetch(`${INFERENCE}/models`)).json() as { data: { id: string; root?: string }[] };
    const v0 = served.data.find((m) => m.id === adapterName(rlId, 0));
    expect(v0).toBeDefined();
    expect(path.resolve(v0!.root!)).toBe(path.resolve(fileURLToPath(sftRecord.adapter!.uri)));

    const res = await rl.result();
    await recordHistory(rl, 'real-trainrun-init-from');
    expect(res).toMatchObject({ stepsCompleted: 1, policyVersion: 1, stopped: 'completed' });
    // The new run's own ledger (step 0 only: its checkpoint's ledger.json), one optimizer step, every artifact intact, v1 served.
    const rlRecords = await checkInvariants({ artifacts, runId: rlId, maxSteps: 1, rolloutsPerStep: 2, inferenceUrl: INFERENCE });
    expect(rlRecords[0]!.lineage?.trainer.init_from).toEqual({
      from: sftId, run_id: sftId, step: 0, checkpoint_sha256: sftRecord.checkpoint!.sha256, adapter_sha256: sftRecord.adapter!.sha256,
    });
    // Both rollouts of step 0 ran on this run's version 0 (served as <run>/policy-v0 from the SFT adapter, checked above).
    expect(rlRecords[0]!.lineage?.rollout_policy_versions).toEqual({ 0: 2 });
    const state = JSON.parse(readFileSync(path.join(fileURLToPath(rlRecords[0]!.checkpoint!.uri), 'trainer_state.json'), 'utf8')) as { run_id: string; step: number; policy_version: number };
    expect(state).toMatchObject({ run_id: rlId, step: 0, policy_version: 1 });

    // An EvalSweep of the run's version 0 evaluates what the run started from (the SFT adapter, as
    // <run>/policy-v0), not the base model: every episode's trajectory names that model.
    const heldout = path.join(dir, 'eval-1.jsonl');
    writeTaskSubset(TASKS, 1, heldout);
    const sweep = await client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: `${rlId}-eval-v0`, args: [{ runId: rlId, versions: [0], taskset: heldout, k: 1, maxConcurrent: 1 }] }) as EvalSweepResult;
    expect(sweep.evaluated.map((e) => e.version)).toEqual([0]);
    const trajDir = path.join(artifacts, 'runs', rlId, 'evals', 'trajectories');
    const trajectories = (readdirSync(trajDir, { recursive: true }) as string[]).filter((f) => f.endsWith('.json') && !f.includes('.journal'));
    expect(trajectories.length).toBeGreaterThanOrEqual(1);
    for (const f of trajectories) expect((JSON.parse(readFileSync(path.join(trajDir, f), 'utf8')) as { model: string }).model).toBe(adapterName(rlId, 0));
  }, 1_500_000);

  test('init_from naming a step the origin does not have fails the run at once, naming the key', async () => {
    const runs = readdirSync(path.join(artifacts, 'runs')).filter((r) => r.startsWith('it-warm-sft-'));
    expect(runs.length).toBeGreaterThanOrEqual(1);
    const f = path.join(dir, 'rl-bad.toml');
    writeFileSync(f, `[model]\ninit_from = "${runs[0]}@9"\n[trainer]\ndevice = "cpu"\n[[env]]\nid = "swe-grep"\n`);
    const err = await client.workflow.execute('TrainRun', { taskQueue: 'ratchet', workflowId: `it-warm-bad-${Date.now()}`, args: [{ configPath: f }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    // The run fails with openRun's ConfigError: the activity failure's cause carries the message.
    const messages: string[] = [];
    for (let e: Error | undefined = (err as WorkflowFailedError).cause; e; e = (e as { cause?: Error }).cause) messages.push(e.message);
    expect(messages.join(' <- ')).toMatch(new RegExp(`model.init_from: run "${runs[0]}" has no step 9`));
  });
});
