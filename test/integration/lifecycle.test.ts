/**
 * Runs that last: the real stack (Temporal, vLLM with SmolLM2 on CPU, Docker
 * sandboxes, the Python trainer) through the lifecycle faults of issue 13:
 * two runs at once on one trainer (the lease) while the main (workflow) worker
 * is killed -9, a run terminated on purpose and restarted from its last completed
 * step onto a corrupted checkpoint, and a pause carried across continue-as-new. Each run must meet the
 * fault tests' invariants (checkInvariants). Slow by nature: minutes per test.
 * RATCHET_RECORD_HISTORIES=1 records their histories for the replay test.
 */
import * as path from 'node:path';
import type { WorkflowHandle } from '@temporalio/client';
import { describeWithStack } from '../helpers/stack';
import { recordHistory } from '../helpers/histories';
import { pauseUpdate, progressQuery, resumeUpdate } from '../../src/workflows/messages';
import type { TrainRun } from '../../src/workflows/trainRun';
import type { TrainRunInput, TrainRunResult } from '../../src/contracts';
import { restartPlan } from '../../src/cli/restart';
import { LocalArtifactStore, uriToPath } from '../../src/artifacts/store';
import { readRunRecords, readRunState } from '../../src/records/runRecords';
import { checkInvariants, runResult, tinyConfig, useStackWorkers, waitForProgress, type TinyConfigOptions } from '../helpers/trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

jest.setTimeout(1_200_000);

describeWithStack('TrainRun lifecycle on the real stack', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const stack = useStackWorkers('lifecycle');
  const { dir, artifacts } = stack;

  async function startRun(label: string, opts: TinyConfigOptions & Partial<TrainRunInput> = {}): Promise<{ runId: string; handle: WorkflowHandle<typeof TrainRun> }> {
    const configPath = await tinyConfig(dir, opts);
    const runId = `it-life-${label}-${Date.now()}`;
    const input: TrainRunInput = {
      configPath, runId, continueAsNewEvery: opts.continueAsNewEvery,
      trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' },
    };
    const handle = await stack.client.workflow.start<typeof TrainRun>('TrainRun', { taskQueue: 'ratchet', workflowId: runId, args: [input] });
    return { runId, handle };
  }

  async function expectInvariants(runId: string, res: TrainRunResult, maxSteps = 2): Promise<void> {
    expect(res).toMatchObject({ stepsCompleted: maxSteps, policyVersion: maxSteps, stopped: 'completed' });
    await checkInvariants({ artifacts, runId, maxSteps, rolloutsPerStep: 2, inferenceUrl: INFERENCE });
  }

  // One pair of runs for the lease and the main worker's kill: both runs' workflows live on that worker while
  // one holds the trainer and the other waits for it. (Separate runs cost CI about a minute more.)
  test('two runs at once on one trainer, the second waiting for the lease when the main (workflow) worker is killed -9 and started again: both complete with exact ledgers', async () => {
    const a = await startRun('lease-a');
    await waitForProgress(a.handle, 'run a training', (p) => p.phase === 'training');
    const b = await startRun('lease-b');
    await waitForProgress(b.handle, 'run b waiting for the trainer', (p) => p.status === 'waiting-for-trainer');
    await stack.kill('main');
    await sleep(3000);
    stack.start('main');
    const [ra, rb] = await Promise.all([runResult(a.handle), runResult(b.handle)]);
    await expectInvariants(a.runId, ra);
    await expectInvariants(b.runId, rb);
    await recordHistory(a.handle, 'real-main-worker-killed');
    await recordHistory(b.handle, 'real-waited-for-trainer');
  });

  // Also the plain restart of a run terminated on purpose mid-training (what `ratchet restart` plans): from its
  // last completed step, no double step. A clean restart's checkpoint load is the faults test's trainer kill.
  test('a run terminated on purpose mid-training, its newest checkpoint corrupted, restarted: the trainer reload falls back to the one before, retrains the later steps once each, on record, no double step', async () => {
    const { runId, handle } = await startRun('corrupt', { maxSteps: 3 });
    await waitForProgress(handle, 'step 2 training', (p) => p.step === 2 && p.phase === 'training');
    await handle.terminate('lifecycle test: the run ends mid-training, then its newest checkpoint is damaged');
    const store = new LocalArtifactStore(artifacts);
    const state = (await readRunState(store, runId))!;
    // Terminated before step 2 was recorded: step 1's checkpoint is the newest.
    expect(state.completedStep).toBe(1);
    const bad = state.completedStep;
    // Flip bytes in the trainer state (not the adapter: the restarted run serves the adapter before it trains).
    const file = path.join(uriToPath(state.checkpoint!.uri), 'trainer_state.json');
    const { readFile, writeFile } = await import('node:fs/promises');
    const buf = await readFile(file);
    buf[10] = buf[10]! ^ 0x20;
    await writeFile(file, buf);
    // A restart that does not check first (what 0.5's `ratchet restart` did): the trainer's load meets the damage.
    const { input } = restartPlan(runId, (await handle.describe()).status.name, state, undefined);
    const again = await stack.client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: runId,
      args: [{ ...input, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } }],
    });
    const res = await runResult(again);
    // Every step once by its winning record, the trainer's ledger exactly those steps, one optimizer step each.
    await expectInvariants(runId, res, 3);
    const recs = await readRunRecords(store, runId);
    expect(recs.fallbacks).toHaveLength(1);
    expect(recs.fallbacks[0]).toMatchObject({ by: 'trainer-load', epoch: 1, bad: { step: bad, checkpoint: state.checkpoint }, used: { step: bad - 1 }, retrained_steps: [bad] });
    expect(recs.steps.map((r) => r.epoch ?? 0)).toEqual([0, 1, 1]);
    // The damaged step has two records: the voided one and the winner.
    expect(recs.all.filter((r) => r.step === bad)).toHaveLength(2);
    await recordHistory(again, 'real-checkpoint-fallback');
  });

  test('pause, continue-as-new while paused, resume: the pause holds across executions', async () => {
    const { runId, handle } = await startRun('pause', { maxSteps: 2, continueAsNewEvery: 1, asyncLevel: 0 });
    const first = (await handle.describe()).runId;
    await waitForProgress(handle, 'step 0 rollouts', (p) => p.step === 0 && p.phase === 'rollouts');
    expect(await handle.executeUpdate(pauseUpdate)).toBe('paused');
    await waitForProgress(handle, 'paused in the next execution', (p) => p.step === 1 && p.status === 'paused' && p.phase === 'idle');
    expect((await handle.describe()).runId).not.toBe(first);
    await sleep(5000);
    expect(await handle.query(progressQuery)).toMatchObject({ step: 1, status: 'paused' });
    expect(await handle.executeUpdate(resumeUpdate)).toBe('running');
    const res = await runResult(handle);
    await expectInvariants(runId, res);
    await recordHistory(handle, 'real-pause-across-continue-as-new');
  });
});
