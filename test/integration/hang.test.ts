/**
 * A hung trainer, not a dead one: a real TrainRun on the local stack (Temporal,
 * vLLM, Docker sandboxes, the Python trainer) while the trainer is frozen with
 * SIGSTOP in the middle of step 1. A frozen process cannot run its own watchdog;
 * its liveness file goes stale, the supervisor (src/stack/supervisor.ts, the one
 * `ratchet up` runs, here over the test's own workers) kill -9s it and starts a
 * new trainer, the workflow's heartbeat timeout moves the step there, and the run
 * completes with every invariant (checkInvariants): each step trained once by
 * the ledger and the optimiser's count, hashes match, vLLM serves the last version.
 *
 * Before this, the run waited for the frozen process with no end.
 */
import { readStepRecords } from '../../src/records/runRecords';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { existsSync, mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client, Connection, WorkflowFailedError, type WorkflowHandle } from '@temporalio/client';
import { describeLong, REPO } from '../helpers/stack';
import { logger } from '../../src/shared/logger';
import { Supervisor, type Supervised, type SupervisorAction } from '../../src/stack/supervisor';
import { progressQuery } from '../../src/workflows/messages';
import type { TrainRun } from '../../src/workflows/trainRun';
import type { Progress, TrainRunInput, TrainRunResult } from '../../src/contracts';
import { checkInvariants, distBuilt, killProc, startProc, takeOverStackWorkers, tinyConfig, workerCommands, type Proc } from '../helpers/trainrunStack';

const INFERENCE = process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1';
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
type Which = 'main' | 'rollout' | 'trainer';

// About 12 minutes here: a long test (npm run test:long). CI's soak (seed 56) hangs the trainer mid-step too.
describeLong('a hung (SIGSTOP) trainer is detected and replaced', ['temporalServer', 'inference', 'docker', 'model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-hang-'));
  const artifacts = path.join(dir, 'artifacts');
  const marker = path.join(dir, 'fault.marker');
  const cmds = workerCommands(artifacts);
  const workers: Record<Which, Proc | undefined> = { main: undefined, rollout: undefined, trainer: undefined };
  const startedAt: Record<Which, number> = { main: 0, rollout: 0, trainer: 0 };
  const actions: SupervisorAction[] = [];
  let supervisor: Supervisor | undefined;
  let restoreStackWorkers: () => Promise<void> = async () => {};
  let connection: Connection;
  let client: Client;

  const alive = (which: Which) => `${dir}/${which}.alive`;
  const start = (which: Which, extraEnv: Record<string, string> = {}) => {
    const c = cmds[which]();
    workers[which] = startProc(c[0], c[1], [...c[2]], { ...c[3], RATCHET_LIVENESS_FILE: alive(which), ...extraEnv }, dir);
    startedAt[which] = Date.now();
  };

  beforeAll(async () => {
    if (!distBuilt()) throw new Error(`dist/workers is missing: run npm run build first (in ${REPO})`);
    restoreStackWorkers = await takeOverStackWorkers();
    connection = await Connection.connect({ address: '127.0.0.1:7233' });
    client = new Client({ connection });
    start('main');
    start('rollout');
    // The first trainer pauses 20 s after a micro-batch of step 1 (and says so in the marker): mid-step for certain.
    start('trainer', { RATCHET_TRAINER_FAULT_SLEEP_S: '20', RATCHET_TRAINER_FAULT_STEP: '1', RATCHET_TRAINER_FAULT_MARKER: marker });
    const log = logger.child({ component: 'test-supervisor' });
    const entries: Supervised[] = (['main', 'rollout', 'trainer'] as const).map((which) => ({
      name: `worker-${which}`,
      pid: () => workers[which]?.child.pid,
      startedAt: () => startedAt[which],
      livenessFile: alive(which),
      staleAfterMs: 20_000,
      startGraceMs: 120_000,
      restart: async () => {
        await killProc(workers[which]!, 'SIGKILL');
        start(which);
      },
    }));
    supervisor = new Supervisor(entries, { log, checkEveryMs: 2_000, onAction: (a) => actions.push(a) }).start();
  });

  afterAll(async () => {
    supervisor?.stop();
    for (const p of Object.values(workers)) {
      if (!p) continue;
      try { process.kill(p.child.pid!, 'SIGCONT'); } catch { /* gone */ }
      await killProc(p, 'SIGTERM');
    }
    await connection?.close();
    await restoreStackWorkers();
  });

  async function waitFor(handle: WorkflowHandle<typeof TrainRun>, what: string, pred: (p: Progress) => boolean, timeoutMs = 900_000): Promise<Progress> {
    const deadline = Date.now() + timeoutMs;
    let last: Progress | undefined;
    while (Date.now() < deadline) {
      try {
        last = await handle.query(progressQuery);
        if (pred(last)) return last;
      } catch { /* no worker right now */ }
      const { status } = await handle.describe();
      if (status.name !== 'RUNNING') throw new Error(`the run ended (${status.name}) while waiting for ${what}; last progress: ${JSON.stringify(last)}`);
      await sleep(500);
    }
    throw new Error(`timed out waiting for ${what}; last progress: ${JSON.stringify(last)}`);
  }

  test('SIGSTOP of the trainer mid-step: killed by the supervisor, the step retried on a new trainer, trained once', async () => {
    const configPath = await tinyConfig(dir);
    const runId = `it-hang-trainer-${Date.now()}`;
    const input: TrainRunInput = { configPath, runId, trainerTimeouts: { scheduleToStart: '30 seconds', heartbeat: '30 seconds' } };
    const handle = await client.workflow.start<typeof TrainRun>('TrainRun', { taskQueue: 'ratchet', workflowId: runId, args: [input] });

    await waitFor(handle, 'step 1 training', (p) => p.step === 1 && p.phase === 'training');
    const deadline = Date.now() + 600_000;
    while (!existsSync(marker)) {
      if (Date.now() > deadline) throw new Error('the trainer never reached the fault hook of step 1');
      await sleep(200);
    }
    const frozen = workers.trainer!;
    process.kill(frozen.child.pid!, 'SIGSTOP');
    const frozenAt = Date.now();

    let res: TrainRunResult;
    for (;;) {
      try {
        res = await handle.result();
        break;
      } catch (err) {
        if (err instanceof WorkflowFailedError) throw err;
        await sleep(2000);
      }
    }
    expect(res).toMatchObject({ stepsCompleted: 2, policyVersion: 2, stopped: 'completed' });
    await checkInvariants({ artifacts, runId, maxSteps: 2, rolloutsPerStep: 2, inferenceUrl: INFERENCE });

    // The frozen trainer was replaced because its liveness went stale, not because anything else killed it.
    const replaced = actions.filter((a) => a.name === 'worker-trainer');
    expect(replaced).toEqual([expect.objectContaining({ action: 'restarted', reason: 'stale' })]);
    expect(frozen.child.signalCode).toBe('SIGKILL');
    expect(workers.trainer).not.toBe(frozen);
    const records = (await readStepRecords(new LocalArtifactStore(artifacts), runId)) as unknown as { step: number; trainer: { restarts: number } }[];
    expect(records.find((r) => r.step === 1)!.trainer.restarts).toBeGreaterThanOrEqual(1);
    expect(actions.filter((a) => a.name !== 'worker-trainer')).toEqual([]); // the other workers stayed live throughout
    // Time to recover, for the record: freeze to completed run.
    logger.info({ recovered_in_s: Math.round((Date.now() - frozenAt) / 1000) }, 'hung trainer recovered');
  }, 1_500_000);
});
