/**
 * Issue 39, item 1: `ratchet restart` reads the run's status first and never writes into a run that is
 * RUNNING or COMPLETED, even when that run's newest checkpoint is corrupt (the old order verified, and
 * committed a fallback, before it looked). The command itself (commander), a real Temporal dev server
 * with a running and a completed `TrainRun`, and the run's real local store, compared byte for byte.
 */
import { createHash } from 'node:crypto';
import { promises as fs, mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, Worker, bundleWorkflowCode } from '@temporalio/worker';
import pino from 'pino';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { createMetricsActivities } from '../../src/activities/metrics';
import { buildProgram } from '../../src/cli';
import { EXIT } from '../../src/cli/exit';
import * as temporalCli from '../../src/cli/temporal';
import type { RunStateFile, StepRecord } from '../../src/contracts';
import { describeWithStack, TEMPORAL_BIN } from '../helpers/stack';
import { ref } from './workflowFakes';

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
  let env: TestWorkflowEnvironment;
  let root: string;

  beforeAll(async () => {
    Runtime.install({ logger: new DefaultLogger('WARN') });
    env = await TestWorkflowEnvironment.createLocal({ server: { executable: { type: 'existing-path', path: TEMPORAL_BIN }, ip: '127.0.0.1' } });
    jest.spyOn(temporalCli, 'connectClient').mockImplementation(async () => ({ client: env.client, close: async () => undefined }) as never);
    root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-rg-'));
  }, 180_000);

  afterAll(async () => {
    jest.restoreAllMocks();
    await env?.teardown();
  });

  const restart = (run: string) => buildProgram().parseAsync(['node', 'ratchet', 'restart', run]).then(() => undefined, (e: unknown) => e);

  it('RUNNING: refused, and the store is byte-equal before and after', async () => {
    await runWithCorruptNewest(root, 'rg-running');
    // Nothing polls this queue: the run stays RUNNING.
    await env.client.workflow.start('TrainRun', { taskQueue: 'nobody-polls-this', workflowId: 'rg-running', memo: { artifacts: { root } } });
    const before = await snapshot(root);
    const err = await restart('rg-running');
    expect(err).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/is running/) });
    expect(await snapshot(root)).toEqual(before);
  });

  it('COMPLETED: refused, and the store is byte-equal before and after', async () => {
    await runWithCorruptNewest(root, 'rg-done');
    const workflowBundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../fixtures/workflows/trainRunStub'), logger: new DefaultLogger('WARN') });
    const worker = await Worker.create({ connection: env.nativeConnection, taskQueue: 'rg-done', workflowBundle });
    await worker.runUntil(env.client.workflow.execute('TrainRun', { taskQueue: 'rg-done', workflowId: 'rg-done', memo: { artifacts: { root } } }));
    const before = await snapshot(root);
    const err = await restart('rg-done');
    expect(err).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/is completed/) });
    expect(await snapshot(root)).toEqual(before);
  });
});
