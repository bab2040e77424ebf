/**
 * Issue 39, item 1: `ratchet restart` reads the run's status first and never writes into a run that is
 * RUNNING or COMPLETED, even when that run's newest checkpoint is corrupt (the old order verified, and
 * committed a fallback, before it looked). The command itself (commander), a real Temporal dev server
 * with a running and a completed `TrainRun`, and the run's real local store, compared byte for byte.
 * `ratchet fallback revert` the same way: refused on a running run with nothing written; on a terminated
 * run it undoes the fallback, recorded with identity and reason.
 */
import { createHash } from 'node:crypto';
import { promises as fs, mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from '@temporalio/worker';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createMetricsActivities } from '../../../src/activities/metrics';
import { buildProgram } from '../../../src/cli';
import { EXIT } from '../../../src/cli/exit';
import * as temporalCli from '../../../src/cli/temporal';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { describeWithStack } from '../../helpers/stack';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { commitFallback, planFallback } from '../../../src/records/fallback';
import { readRunRecords, readRunState } from '../../../src/records/runRecords';
import { ref } from '../../helpers/workflowFakes';

jest.setTimeout(120_000);

/** Every file below `root` with its sha256. */
async function snapshot(root: string): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  for (const e of await fs.readdir(root, { recursive: true, withFileTypes: true })) {
    if (!e.isFile()) continue;
    const f = path.join(e.parentPath, e.name);
    out[path.relative(root, f)] = createHash('sha256').update(readFileSync(f)).digest('hex');
  }
  return out;
}

/** Run `runId` with steps 0 and 1 recorded in `root`, step 1's adapter corrupt. */
async function runWithCorruptNewest(root: string, runId: string): Promise<void> {
  const store = new LocalArtifactStore(root);
  const { recordStep } = createMetricsActivities({ store, logger: pino({ level: 'silent' }) });
  for (let s = 0; s < 2; s++) {
    const src = mkdtempSync(path.join(os.tmpdir(), 'ratchet-rg-src-'));
    mkdirSync(path.join(src, 'adapter'));
    writeFileSync(path.join(src, 'adapter', 'adapter_model.safetensors'), Buffer.alloc(64, s + 1));
    writeFileSync(path.join(src, 'trainer_state.json'), '{}');
    const checkpoint = await store.putDir(`runs/${runId}/checkpoints/step-${s}`, src);
    const record: StepRecord = {
      format: 'ratchet.step/v1', run_id: runId, step: s, time: `2026-01-01T00:0${s}:00Z`, policy_version: s + 1,
      mean_reward: 0, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
      mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: { loss: 1 }, timing_ms: {}, checkpoint,
    };
    const state: RunStateFile = {
      format: 'ratchet.run-state/v1', runId, configSha256: 'x', completedStep: s, nextStep: s + 1, policyVersion: s + 1,
      configRef: ref('config'), seed: 0, checkpoint,
    };
    await recordStep({ record, state });
  }
  const bad = path.join(root, 'runs', runId, 'checkpoints', 'step-1', 'adapter', 'adapter_model.safetensors');
  const buf = readFileSync(bad);
  buf[0] = buf[0]! ^ 0xff;
  writeFileSync(bad, buf);
}

describeWithStack('ratchet restart on a running or completed run (real dev server, real store)', ['temporalBinary'], () => {
  const world = useFakeWorld({ workflowsPath: require.resolve('../../fixtures/workflows/trainRunStub') });
  let root: string;

  beforeAll(async () => {
    jest.spyOn(temporalCli, 'connectClient').mockImplementation(async () => ({ client: world.env.client, close: async () => undefined }) as never);
    root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-rg-'));
  }, 180_000);

  afterAll(async () => {
    jest.restoreAllMocks();
  });

  const restart = (run: string) => buildProgram().parseAsync(['node', 'ratchet', 'restart', run]).then(() => undefined, (e: unknown) => e);

  it('RUNNING: refused, and the store is byte-equal before and after', async () => {
    await runWithCorruptNewest(root, 'rg-running');
    // Nothing polls this queue: the run stays RUNNING.
    await world.env.client.workflow.start('TrainRun', { taskQueue: 'nobody-polls-this', workflowId: 'rg-running', memo: { artifacts: { root } } });
    const before = await snapshot(root);
    const err = await restart('rg-running');
    expect(err).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/is running/) });
    expect(await snapshot(root)).toEqual(before);
  });

  it('COMPLETED: refused, and the store is byte-equal before and after', async () => {
    await runWithCorruptNewest(root, 'rg-done');
    const worker = await Worker.create({ connection: world.env.nativeConnection, taskQueue: 'rg-done', workflowBundle: world.bundle });
    await worker.runUntil(world.env.client.workflow.execute('TrainRun', { taskQueue: 'rg-done', workflowId: 'rg-done', memo: { artifacts: { root } } }));
    const before = await snapshot(root);
    const err = await restart('rg-done');
    expect(err).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/is completed/) });
    expect(await snapshot(root)).toEqual(before);
  });

  const revert = (run: string, ...args: string[]) => buildProgram().parseAsync(['node', 'ratchet', 'fallback', 'revert', run, ...args]).then(() => undefined, (e: unknown) => e);

  /** A fallback committed on an error that was not corruption (what older code did on a store outage). */
  async function wrongFallback(runId: string): Promise<void> {
    await runWithCorruptNewest(root, runId);
    const bad = path.join(root, 'runs', runId, 'checkpoints', 'step-1', 'adapter', 'adapter_model.safetensors');
    const buf = readFileSync(bad);
    buf[0] = buf[0]! ^ 0xff; // sound again: the fallback below had no reason
    writeFileSync(bad, buf);
    const store = new LocalArtifactStore(root);
    const state = (await readRunState(store, runId))!;
    await commitFallback(store, await planFallback(store, state, 'StoreUnavailableError: 503 Slow Down', 'restart', '2026-01-01T01:00:00.000Z'));
  }

  it('fallback revert on a RUNNING run: refused, the store byte-equal', async () => {
    await wrongFallback('rv-running');
    await world.env.client.workflow.start('TrainRun', { taskQueue: 'nobody-polls-this', workflowId: 'rv-running', memo: { artifacts: { root } } });
    const before = await snapshot(root);
    const err = await revert('rv-running', '--reason', 'the store was down');
    expect(err).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/is running; nothing written.*ratchet stop/s) });
    expect(await snapshot(root)).toEqual(before);
  });

  it('fallback revert on a TERMINATED run: the state before the fallback is back, recorded with identity and reason; a second revert is refused', async () => {
    await wrongFallback('rv-term');
    const handle = await world.env.client.workflow.start('TrainRun', { taskQueue: 'nobody-polls-this', workflowId: 'rv-term', memo: { artifacts: { root } } });
    await handle.terminate('test');
    const store = new LocalArtifactStore(root);
    expect(await readRunState(store, 'rv-term')).toMatchObject({ completedStep: 0, epoch: 1 });
    expect(await revert('rv-term', '--reason', 'the store was down, not corrupt')).toBeUndefined();
    const state = (await readRunState(store, 'rv-term'))!;
    expect(state).toMatchObject({ completedStep: 1, nextStep: 2, policyVersion: 2, epoch: 2 });
    const records = await readRunRecords(store, 'rv-term');
    expect(records.steps.map((r) => [r.step, r.epoch ?? 0])).toEqual([[0, 0], [1, 0]]);
    expect(records.reverts).toEqual([expect.objectContaining({ reverts: 1, epoch: 2, reason: 'the store was down, not corrupt', identity: expect.stringMatching(/.+@.+/), restored: expect.objectContaining({ step: 1 }) })]);
    const before = await snapshot(root);
    expect(await revert('rv-term', '--reason', 'again')).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/reverted already.*nothing written/s) });
    expect(await snapshot(root)).toEqual(before);
  });
});
