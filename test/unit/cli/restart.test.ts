/**
 * `ratchet restart`: which runs may restart, and from where.
 *
 * The "ratchet restart on a running or completed run (real dev server, real store)" block:
 * Issue 39, item 1: `ratchet restart` reads the run's status first and never writes into a run that is
 * RUNNING or COMPLETED, even when that run's newest checkpoint is corrupt (the old order verified, and
 * committed a fallback, before it looked). The command itself (commander), a real Temporal dev server
 * with a running and a completed `TrainRun`, and the run's real local store, compared byte for byte.
 * `ratchet fallback revert` the same way: refused on a running run with nothing written; on a terminated
 * run it undoes the fallback, recorded with identity and reason.
 */
import { readRunState, restartPlan } from '../../../src/cli/restart';
import { runKeys } from '../../../src/artifacts/keys';
import type { ArtifactStore } from '../../../src/artifacts/store';
import { CliError, EXIT } from '../../../src/cli/exit';
import { buildProgram } from '../../../src/cli';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { ref } from '../../helpers/workflowFakes';
import { createHash } from 'node:crypto';
import { promises as fs, mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { Worker } from '@temporalio/worker';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createMetricsActivities } from '../../../src/activities/metrics';
import * as temporalCli from '../../../src/cli/temporal';
import { describeWithStack } from '../../helpers/stack';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { commitFallback, planFallback } from '../../../src/records/fallback';
import { readRunRecords, readRunState as readRecordedState } from '../../../src/records/runRecords';

jest.setTimeout(120_000); // the longest limit of the blocks merged here

const state: RunStateFile = {
  format: 'ratchet.run-state/v1', runId: 'r1', configSha256: 'x', completedStep: 4, nextStep: 5, policyVersion: 5,
  configRef: { ...ref('config'), uri: 'file:///art/runs/r1/config.json' }, seed: 0,
};

function codeOf(fn: () => unknown): [number, string] {
  try {
    fn();
  } catch (err) {
    if (err instanceof CliError) return [err.code, err.message];
    throw err;
  }
  return [0, 'no error'];
}

describe('ratchet restart', () => {
  it('is a command', () => {
    expect(buildProgram().commands.map((c) => c.name())).toContain('restart');
  });

  it.each(['FAILED', 'TERMINATED', 'CANCELLED', 'TIMED_OUT'])('restarts a %s run from its last completed step, same run id', (status) => {
    const plan = restartPlan('r1', status, state, undefined);
    expect(plan.input).toEqual({ configPath: '/art/runs/r1/config.json', runId: 'r1' });
    expect(plan.from).toBe('step 5 (policy v5)');
  });

  it('refuses a running or completed run, saying what to do', () => {
    expect(codeOf(() => restartPlan('r1', 'RUNNING', state, undefined))).toEqual([EXIT.failure, expect.stringMatching(/is running.*ratchet status r1/)]);
    expect(codeOf(() => restartPlan('r1', 'COMPLETED', state, undefined))).toEqual([EXIT.failure, expect.stringMatching(/is completed, not failed or terminated/)]);
  });

  it('a run that never completed a step needs its config, and then starts from step 0', () => {
    expect(codeOf(() => restartPlan('r1', 'FAILED', undefined, undefined))).toEqual([EXIT.notReady, expect.stringMatching(/--config <its config>/)]);
    expect(restartPlan('r1', 'FAILED', undefined, 'configs/a.toml')).toEqual({ input: { configPath: 'configs/a.toml', runId: 'r1' }, from: 'step 0' });
  });

  describe('a run in a store of its own (hole 9: an S3 run was told it "never completed a step")', () => {
    const settings = { url: 's3://ratchet-runs/prod', endpoint: 'http://minio:9000' };
    const s3State: RunStateFile = { ...state, configRef: { ...ref('config'), uri: 's3://ratchet-runs/prod/runs/r1/config.json' } };
    /** The run's S3 store, faked: it holds the state file; the local store does not. */
    const fakeStore = (files: Record<string, unknown>) => ({
      url: 's3://ratchet-runs/prod',
      read: async (key: string) => (key in files ? Buffer.from(JSON.stringify(files[key])) : undefined),
      list: async (prefix: string) => Object.keys(files).filter((k) => k.startsWith(prefix)),
    }) as unknown as ArtifactStore;

    it('reads the state from the run\'s store and resumes from it, with the store\'s settings', async () => {
      const read = await readRunState('r1', fakeStore({ [runKeys.state('r1')]: s3State }));
      expect(read).toEqual(s3State);
      const plan = restartPlan('r1', 'FAILED', read, undefined, settings);
      expect(plan.from).toBe('step 5 (policy v5)');
      expect(plan.input).toMatchObject({
        runId: 'r1', configPath: 's3://ratchet-runs/prod/runs/r1/config.json',
        resume: { nextStep: 5, policyVersion: 5, configRef: s3State.configRef, artifacts: settings },
      });
    });

    it('a run with no state in its store never completed a step', async () => {
      expect(await readRunState('r1', fakeStore({}))).toBeUndefined();
      expect(codeOf(() => restartPlan('r1', 'FAILED', undefined, undefined, settings))).toEqual([EXIT.notReady, expect.stringMatching(/never completed a step/)]);
    });

    it('an s3:// config ref without the run\'s settings is not read as a local path', () => {
      // What the old code did with an S3 run's state: uriToPath threw on the s3:// uri.
      expect(() => restartPlan('r1', 'FAILED', s3State, undefined)).toThrow(/not a file:\/\/ uri/);
    });
  });
});

describeWithStack('ratchet restart on a running or completed run (real dev server, real store)', ['temporalBinary'], () => {
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
    const state = (await readRecordedState(store, runId))!;
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
    expect(await readRecordedState(store, 'rv-term')).toMatchObject({ completedStep: 0, epoch: 1 });
    expect(await revert('rv-term', '--reason', 'the store was down, not corrupt')).toBeUndefined();
    const state = (await readRecordedState(store, 'rv-term'))!;
    expect(state).toMatchObject({ completedStep: 1, nextStep: 2, policyVersion: 2, epoch: 2 });
    const records = await readRunRecords(store, 'rv-term');
    expect(records.steps.map((r) => [r.step, r.epoch ?? 0])).toEqual([[0, 0], [1, 0]]);
    expect(records.reverts).toEqual([expect.objectContaining({ reverts: 1, epoch: 2, reason: 'the store was down, not corrupt', identity: expect.stringMatching(/.+@.+/), restored: expect.objectContaining({ step: 1 }) })]);
    const before = await snapshot(root);
    expect(await revert('rv-term', '--reason', 'again')).toMatchObject({ code: EXIT.failure, message: expect.stringMatching(/reverted already.*nothing written/s) });
    expect(await snapshot(root)).toEqual(before);
  });
});
