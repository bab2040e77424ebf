/**
 * SftRun on the real stack (Temporal, vLLM with SmolLM2 on CPU, Docker sandboxes, the
 * Python trainer): demonstrations made by the scripted solver on real sandboxes, two SFT
 * steps, the trainer killed (-9) mid-step and started again, each step applied exactly once
 * (the run invariants: ledger and optimizer count), and the final adapter served by vLLM.
 * Then the warm start from that run (one SftRun serves both: CI ran a second one for it before):
 * a TrainRun with [model] init_from = the SFT run starts its trainer from the SFT adapter (a fresh
 * ledger: its own step 0), vLLM serves that adapter as <run>/policy-v0 for the first rollouts, the
 * step trains once, and its lineage names the origin by sha256; an EvalSweep of its version 0
 * evaluates the SFT adapter; an init_from naming a step the SFT run does not have fails the run
 * before anything starts, naming the key.
 * RATCHET_RECORD_HISTORIES=1 records the histories for the replay test.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import pino from 'pino';
import { WorkflowFailedError } from '@temporalio/client';
import { describeWithStack, REPO } from '../helpers/stack';
import { recordHistory } from '../helpers/histories';
import type { SftRun } from '../../src/workflows/sftRun';
import type { TrainRun } from '../../src/workflows/trainRun';
import type { StepRecord, TrainRunInput } from '../../src/contracts';
import type { EvalSweepResult } from '../../src/contracts/eval';
import { writeTaskSubset } from '../../src/tasks/subset';
import { makeDemonstrations } from '../../src/sft/demos';
import { adapterName } from '../../src/shared/adapters';
import { SandboxManager } from '../../src/sandbox/manager';
import { loadTasks } from '../../src/tasks/load';
import { checkInvariants, FAST_LIVENESS, runResult, tinyConfig, useStackWorkers, waitForProgress } from '../helpers/trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const TASKS = path.join(REPO, '.ratchet', 'tasks', 'train.jsonl');
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

jest.setTimeout(1_200_000);

describeWithStack('SftRun on the real stack', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  // The rollout worker starts for the warm start's TrainRun (an SftRun has no rollouts).
  const stack = useStackWorkers('sft', { start: ['main', 'trainer'] });
  const { dir, artifacts } = stack;
  /** The SFT run of the first test and its last step's record, which the warm start's tests start from. */
  let sftId = '';
  let sftRecord: StepRecord | undefined;
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
${FAST_LIVENESS.toml}
`);
    const runId = `it-sft-${Date.now()}`;
    sftId = runId;
    // The killed trainer's step waits out its heartbeat and then schedule-to-start timeouts: 20 s each (30 s cost 20 s more).
    const input: TrainRunInput = { configPath, runId, trainerTimeouts: FAST_LIVENESS.trainerTimeouts };
    const handle = await stack.client.workflow.start<typeof SftRun>('SftRun', { taskQueue: 'ratchet', workflowId: runId, args: [input] });

    // Step 1, so the retried step must first load step 0's checkpoint on the new trainer.
    await waitForProgress(handle, 'step 1 training', (p) => p.step === 1 && p.phase === 'training');
    // Step 0's adapter is served by vLLM now (the run unloads its adapters when it ends).
    const models = await (await fetch(`${INFERENCE}/models`)).json() as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toContain(adapterName(runId, 1));
    await sleep(1500);
    await stack.kill('trainer');
    await sleep(3000);
    stack.start('trainer');

    const res = await runResult(handle);
    await recordHistory(handle, 'real-sftrun-trainer-killed');
    expect(res).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    // Each step applied once (ledger and optimizer count), every artifact intact, the final version served by vLLM.
    const records = await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 0, inferenceUrl: INFERENCE });
    expect(records.find((r) => r.step === 1)!.trainer.restarts).toBeGreaterThanOrEqual(1);
    sftRecord = records.find((r) => r.step === 1);
    for (const r of records) expect(Number((r.trainer as { nll?: number }).nll)).toBeGreaterThan(0);
    // The run's data was frozen into its store, every line naming its source.
    const frozen = readFileSync(path.join(artifacts, 'runs', runId, 'sft', 'data.jsonl'), 'utf8').trim().split('\n');
    expect(frozen.map((l) => (JSON.parse(l) as { where: string }).where)).toEqual(demos.kept.map((_, i) => `${data}:${i + 1}`));
  }, 1_200_000);

  test('warm start: a TrainRun init_from the SFT run starts from its adapter (served as policy-v0), trains one step, lineage names it', async () => {
    // init_from = the run: its newest step (1).
    if (!sftRecord?.adapter) throw new Error('the SFT test above did not finish with an adapter at step 1');
    const origin = sftRecord;
    stack.start('rollout');

    // The TrainRun from it.
    const rlConfig = await tinyConfig(dir, { name: 'rl', maxSteps: 1, asyncLevel: 0, tables: `[model]\ninit_from = "${sftId}"` });
    const rlId = `it-warm-rl-${Date.now()}`;
    const rl = await stack.client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: rlId,
      args: [{ configPath: rlConfig, runId: rlId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } }],
    });
    // While step 0's rollouts run, vLLM serves version 0 from the SFT run's adapter directory.
    await waitForProgress(rl, 'step 0 rollouts', (p) => p.step === 0 && p.phase === 'rollouts');
    const served = await (await fetch(`${INFERENCE}/models`)).json() as { data: { id: string; root?: string }[] };
    const v0 = served.data.find((m) => m.id === adapterName(rlId, 0));
    expect(v0).toBeDefined();
    expect(path.resolve(v0!.root!)).toBe(path.resolve(fileURLToPath(origin.adapter!.uri)));

    const res = await runResult(rl);
    await recordHistory(rl, 'real-trainrun-init-from');
    expect(res).toMatchObject({ stepsCompleted: 1, policyVersion: 1, stopped: 'completed' });
    // The new run's own ledger (step 0 only: its checkpoint's ledger.json), one optimizer step, every artifact intact, v1 served.
    const rlRecords = await checkInvariants({ artifacts, runId: rlId, maxSteps: 1, rolloutsPerStep: 2, inferenceUrl: INFERENCE });
    expect(rlRecords[0]!.lineage?.trainer.init_from).toEqual({
      from: sftId, run_id: sftId, step: 1, checkpoint_sha256: origin.checkpoint!.sha256, adapter_sha256: origin.adapter!.sha256,
    });
    // Both rollouts of step 0 ran on this run's version 0 (served as <run>/policy-v0 from the SFT adapter, checked above).
    expect(rlRecords[0]!.lineage?.rollout_policy_versions).toEqual({ 0: 2 });
    const state = JSON.parse(readFileSync(path.join(fileURLToPath(rlRecords[0]!.checkpoint!.uri), 'trainer_state.json'), 'utf8')) as { run_id: string; step: number; policy_version: number };
    expect(state).toMatchObject({ run_id: rlId, step: 0, policy_version: 1 });

    // An EvalSweep of the run's version 0 evaluates what the run started from (the SFT adapter, as
    // <run>/policy-v0), not the base model: every episode's trajectory names that model.
    const heldout = path.join(dir, 'eval-1.jsonl');
    writeTaskSubset(TASKS, 1, heldout);
    const sweep = await stack.client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: `${rlId}-eval-v0`, args: [{ runId: rlId, versions: [0], taskset: heldout, k: 1, maxConcurrent: 1 }] }) as EvalSweepResult;
    expect(sweep.evaluated.map((e) => e.version)).toEqual([0]);
    const trajDir = path.join(artifacts, 'runs', rlId, 'evals', 'trajectories');
    const trajectories = (readdirSync(trajDir, { recursive: true }) as string[]).filter((f) => f.endsWith('.json') && !f.includes('.journal'));
    expect(trajectories.length).toBeGreaterThanOrEqual(1);
    for (const f of trajectories) expect((JSON.parse(readFileSync(path.join(trajDir, f), 'utf8')) as { model: string }).model).toBe(adapterName(rlId, 0));
  }, 1_200_000);

  test('init_from naming a step the origin does not have fails the run at once, naming the key', async () => {
    expect(sftId).not.toBe('');
    const f = path.join(dir, 'rl-bad.toml');
    writeFileSync(f, `[model]\ninit_from = "${sftId}@9"\n[trainer]\ndevice = "cpu"\n[[env]]\nid = "swe-grep"\n`);
    const err = await stack.client.workflow.execute('TrainRun', { taskQueue: 'ratchet', workflowId: `it-warm-bad-${Date.now()}`, args: [{ configPath: f }] }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkflowFailedError);
    // The run fails with openRun's ConfigError: the activity failure's cause carries the message.
    const messages: string[] = [];
    for (let e: Error | undefined = (err as WorkflowFailedError).cause; e; e = (e as { cause?: Error }).cause) messages.push(e.message);
    expect(messages.join(' <- ')).toMatch(new RegExp(`model.init_from: run "${sftId}" has no step 9`));
  });
});
