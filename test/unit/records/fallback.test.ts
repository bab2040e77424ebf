/**
 * Issue 39, item 1: only proven corruption is corruption. A store that cannot be read right now
 * (StoreUnavailableError, ENOSPC in the S3 cache, EMFILE) while a checkpoint is verified plans no
 * fallback and writes nothing: the error comes back typed (StoreUnavailable / DiskFull), so the
 * run waits (waiting-for-store / waiting-for-disk). A sha256 mismatch still falls back.
 */
import { mkdtempSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { PassThrough } from 'node:stream';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import pino from 'pino';
import { StoreUnavailableError } from '../../../src/artifacts/errors';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createCheckpointFallbackActivities } from '../../../src/activities/checkpointFallback';
import { createMetricsActivities } from '../../../src/activities/metrics';
import { verifiedRestartState } from '../../../src/cli/restart';
import { CliError, EXIT } from '../../../src/cli/exit';
import type { RunStateFile, StepRecord } from '../../../src/contracts';
import { checkpointProblem, planFallback } from '../../../src/records/fallback';
import { ref } from '../../helpers/workflowFakes';

const logger = pino({ level: 'silent' });

/** A local store whose localDir throws `fault()` for the checkpoints of the steps in `failing`. */
class FlakyStore extends LocalArtifactStore {
  failing = new Set<string>();
  constructor(root: string, private readonly fault: () => Error) { super(root); }
  override localDir(r: ArtifactRef): Promise<string> {
    if ([...this.failing].some((u) => r.uri.startsWith(u))) return Promise.reject(this.fault());
    return super.localDir(r);
  }
}

const errno = (code: string, p = '/cache/s3/x'): NodeJS.ErrnoException => Object.assign(new Error(`${code}: failed, open '${p}'`), { code, path: p });

async function run(fault: () => Error, steps = 3) {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-fbt-'));
  const store = new FlakyStore(root, fault);
  const { recordStep } = createMetricsActivities({ store, logger });
  const ckpts: { checkpoint: ArtifactRef; adapter: ArtifactRef }[] = [];
  let state: RunStateFile | undefined;
  for (let s = 0; s < steps; s++) {
    const src = mkdtempSync(path.join(tmpdir(), 'ratchet-fbt-src-'));
    mkdirSync(path.join(src, 'adapter'));
    writeFileSync(path.join(src, 'adapter', 'adapter_model.safetensors'), Buffer.alloc(128, s + 1));
    writeFileSync(path.join(src, 'trainer_state.json'), JSON.stringify({ step: s }));
    const key = `runs/r/checkpoints/step-${s}`;
    const checkpoint = await store.putDir(key, src);
    const adapter = await store.putDir(`${key}/adapter`, store.localPath(`${key}/adapter`));
    ckpts.push({ checkpoint, adapter });
    const record: StepRecord = {
      format: 'ratchet.step/v1', run_id: 'r', step: s, time: `2026-01-01T00:0${s}:00Z`, policy_version: s + 1,
      mean_reward: 0, reward_std: 0, reward_components: {}, rollouts: 2, samples: 2, dropped: {}, stop_reasons: {},
      mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: { loss: 1 }, timing_ms: {}, checkpoint, adapter,
    };
    state = {
      format: 'ratchet.run-state/v1', runId: 'r', configSha256: 'x', completedStep: s, nextStep: s + 1,
      policyVersion: s + 1, configRef: ref('config'), seed: 0, checkpoint, adapter,
    };
    await recordStep({ record, state });
  }
  const fallbacks = () => store.list('runs/r/records/fallbacks');
  return { store, ckpts, state: state!, fallbacks };
}

const flip = (uri: string, rel: string): void => {
  const f = path.join(new URL(uri).pathname, rel);
  const b = readFileSync(f);
  b[0] = b[0]! ^ 0xff;
  writeFileSync(f, b);
};

describe('a verification error that is not corruption (issue 39, item 1)', () => {
  const faults: [string, () => Error, string][] = [
    ['StoreUnavailableError (a store 5xx)', () => new StoreUnavailableError('s3://b/p', 'InternalError: We encountered an internal error'), 'StoreUnavailable'],
    ['ENOSPC in the S3 cache', () => errno('ENOSPC'), 'DiskFull'],
    ['EMFILE', () => errno('EMFILE'), 'StoreUnavailable'],
  ];

  it.each(faults)('%s on the newest checkpoint: no fallback, the activity fails typed (a wait), nothing written', async (_name, fault, type) => {
    const { store, ckpts, state, fallbacks } = await run(fault);
    store.failing.add(ckpts[2]!.checkpoint.uri);
    await expect(checkpointProblem(store, state)).rejects.toThrow();
    const { fallBackToVerifiedCheckpoint } = createCheckpointFallbackActivities({ store, logger });
    const err = await fallBackToVerifiedCheckpoint({ state, error: 'ArtifactError: load failed', time: '2026-01-01T03:00:00.000Z' }).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(ApplicationFailure);
    expect((err as ApplicationFailure).type).toBe(type);
    expect(await fallbacks()).toEqual([]);
  });

  it.each(faults)('%s on an older checkpoint while the newest is corrupt: planFallback does not skip it, nothing written', async (_name, fault, type) => {
    const { store, ckpts, state, fallbacks } = await run(fault);
    flip(ckpts[2]!.checkpoint.uri, 'trainer_state.json');
    store.failing.add(ckpts[1]!.checkpoint.uri);
    await expect(planFallback(store, state, 'corrupt', 'restart', '2026-01-01T03:00:00.000Z')).rejects.toThrow();
    const { fallBackToVerifiedCheckpoint } = createCheckpointFallbackActivities({ store, logger });
    const err = await fallBackToVerifiedCheckpoint({ state, error: 'ArtifactError: corrupt', time: '2026-01-01T03:00:00.000Z' }).then(() => undefined, (e: unknown) => e);
    expect((err as ApplicationFailure).type).toBe(type);
    expect(await fallbacks()).toEqual([]);
  });

  it('EMFILE reading a file of a local checkpoint is not "missing": no fallback', async () => {
    const { store, ckpts, state, fallbacks } = await run(() => new Error('unused'));
    const adapterFile = path.join(new URL(ckpts[2]!.checkpoint.uri).pathname, 'adapter', 'adapter_model.safetensors');
    // Checkpoint files are hashed as streams (a full model's weights pass readFile's 2 GiB limit): the stream errors.
    // The module object itself (an `import * as` namespace is frozen), where src/artifacts/store.ts looks it up.
    const fs = jest.requireActual<typeof import('node:fs')>('node:fs');
    const real = fs.createReadStream.bind(fs);
    const spy = jest.spyOn(fs, 'createReadStream').mockImplementation(((p: Parameters<typeof fs.createReadStream>[0], ...rest: unknown[]) => {
      if (String(p) !== adapterFile) return (real as (...a: unknown[]) => ReturnType<typeof fs.createReadStream>)(p, ...rest);
      const stream = new PassThrough();
      process.nextTick(() => stream.destroy(errno('EMFILE', adapterFile)));
      return stream;
    }) as typeof fs.createReadStream);
    try {
      const { fallBackToVerifiedCheckpoint } = createCheckpointFallbackActivities({ store, logger });
      const err = await fallBackToVerifiedCheckpoint({ state, error: 'ArtifactError: load failed', time: '2026-01-01T03:00:00.000Z' }).then(() => undefined, (e: unknown) => e);
      expect((err as ApplicationFailure).type).toBe('StoreUnavailable');
      expect((err as ApplicationFailure).message).toMatch(/EMFILE/);
    } finally {
      spy.mockRestore();
    }
    expect(await fallbacks()).toEqual([]);
  });

  it('a sha256 mismatch still falls back (the older checkpoint verifies)', async () => {
    const { store, ckpts, state, fallbacks } = await run(() => new Error('unused'));
    flip(ckpts[2]!.checkpoint.uri, 'adapter/adapter_model.safetensors');
    const { fallBackToVerifiedCheckpoint } = createCheckpointFallbackActivities({ store, logger });
    const res = await fallBackToVerifiedCheckpoint({ state, error: 'ArtifactError: corrupt', time: '2026-01-01T03:00:00.000Z' });
    expect(res).toMatchObject({ fellBack: true, record: { used: { step: 1 }, retrained_steps: [2] } });
    expect(await fallbacks()).toHaveLength(1);
  });

  it('ratchet restart waits (waiting-for-store) while the store cannot be read, then verifies: no fallback', async () => {
    let failures = 2;
    const { store, ckpts, state, fallbacks } = await run(() => new StoreUnavailableError('s3://b/p', 'ECONNREFUSED'));
    store.failing.add(ckpts[2]!.checkpoint.uri);
    const waits: string[] = [];
    const res = await verifiedRestartState(store, state, new Date(), {
      waitS: 60, sleep: async () => { if (--failures === 0) store.failing.clear(); },
      onWait: (reason) => waits.push(reason),
    });
    expect(waits).toEqual(['waiting-for-store', 'waiting-for-store']);
    expect(res).toEqual({ state });
    expect(await fallbacks()).toEqual([]);
  });

  it('ratchet restart gives up after --store-wait with nothing written (waiting-for-disk on ENOSPC)', async () => {
    const { store, ckpts, state, fallbacks } = await run(() => errno('ENOSPC'));
    store.failing.add(ckpts[2]!.checkpoint.uri);
    const waits: string[] = [];
    const err = await verifiedRestartState(store, state, new Date(), { waitS: 0, sleep: async () => undefined, onWait: (r) => waits.push(r) }).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(CliError);
    expect(err).toMatchObject({ code: EXIT.notReady, message: expect.stringMatching(/disk full.*not corruption: nothing was written.*Fix:/s) });
    expect(await fallbacks()).toEqual([]);
  });
});
