/**
 * Issue 39, item 4, against real MinIO: a store that refuses mid-run (the host's keys rotated away, the
 * bucket removed) is a wait naming the store's error, and the same call goes through once the keys are
 * restored or the bucket recreated; before a run starts (checkStore) the same refusals stay config errors.
 *
 * Activity level: a real activity (recordStep, which writes the run's records) fails with the typed
 * failure StoreUnavailable, the type TrainRun and StepRollouts wait on (waiting-for-store, storeWait.ts);
 * a whole training run is not driven here. Keys are rotated on a private MinIO (the server restarted
 * with other root keys, then with the first again), so the shared one is left alone; the bucket is one
 * of this test's own on the shared MinIO. The soak's store-credentials incident (src/soak/faults.ts) is
 * checked on a private MinIO too: its MinIO user disabled and enabled through the admin API.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { existsSync, mkdtempSync } from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { CreateBucketCommand, DeleteBucketCommand, DeleteObjectsCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { ApplicationFailure } from '@temporalio/common';
import pino from 'pino';
import { StoreConfigError } from '../../src/artifacts/errors';
import { S3ArtifactStore } from '../../src/artifacts/s3';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { checkStore } from '../../src/artifacts/stores';
import { createMetricsActivities } from '../../src/activities/metrics';
import { type RunStateFile, StepRecord } from '../../src/contracts';
import { readStepRecords } from '../../src/records/runRecords';
import { StoreRefusedError } from '../../src/artifacts/errors';
import { injectFault } from '../../src/soak/faults';
import { createSoakStore, storeKeyEnv, swapAwsEnv } from '../../src/soak/storeKey';
import { MINIO, STATE, describeWithStack, useMinioCredentials } from '../helpers/stack';

jest.setTimeout(120_000);

const MINIO_BIN = path.join(STATE, 'minio', 'bin', 'minio');
const logger = pino({ level: 'silent' });

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address() as net.AddressInfo;
      srv.close(() => resolve(port));
    });
    srv.on('error', reject);
  });
}

/** A MinIO of this test's own, on its own port and data dir, started with `secret` as its root password. */
class PrivateMinio {
  private proc?: ChildProcess;
  readonly dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-minio-'));
  constructor(readonly port: number) {}
  get endpoint(): string { return `http://127.0.0.1:${this.port}`; }

  async start(secret: string): Promise<void> {
    this.proc = spawn(MINIO_BIN, ['server', '--quiet', '--address', `127.0.0.1:${this.port}`, this.dir], {
      env: { ...process.env, MINIO_ROOT_USER: MINIO.accessKey, MINIO_ROOT_PASSWORD: secret, MINIO_BROWSER: 'off' }, stdio: 'ignore',
    });
    for (let i = 0; i < 120; i++) {
      if (await fetch(`${this.endpoint}/minio/health/live`).then((r) => r.ok, () => false)) return;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error(`private MinIO on ${this.endpoint} did not become healthy in 30 s`);
  }

  async stop(): Promise<void> {
    const p = this.proc;
    if (!p || p.exitCode !== null) return;
    const exited = new Promise((r) => p.once('exit', r));
    p.kill('SIGTERM');
    await exited;
  }
}

function stepAndState(runId: string, step: number, url: string): { record: StepRecord; state: RunStateFile } {
  const record = StepRecord.parse({ format: 'ratchet.step/v1', run_id: runId, step, time: `2026-01-01T00:0${step}:00.000Z`, mean_reward: 0.5, rollouts: 1, policy_version: step + 1 });
  const state: RunStateFile = {
    format: 'ratchet.run-state/v1', runId, configSha256: 'x', completedStep: step, nextStep: step + 1, policyVersion: step + 1,
    configRef: { uri: `${url}/runs/${runId}/config.json`, sha256: 'a'.repeat(64), bytes: 1 }, seed: 1, artifacts: { url },
  };
  return { record, state };
}

const failureOf = (p: Promise<unknown>): Promise<unknown> => p.then(() => undefined, (e: unknown) => e);

describeWithStack('a store that refuses mid-run is a wait (real MinIO)', ['minio'], () => {
  const cache = mkdtempSync(path.join(os.tmpdir(), 'ratchet-refusal-cache-'));

  beforeAll(() => {
    useMinioCredentials();
    if (!existsSync(MINIO_BIN)) throw new Error(`no MinIO binary at ${MINIO_BIN}. Fix: bash infra/minio.sh setup`);
  });

  test('keys rotated mid-run: StoreUnavailable naming the refusal; restored: the same write goes through; preflight: a config error', async () => {
    const server = new PrivateMinio(await freePort());
    try {
      await server.start(MINIO.secretKey);
      const admin = new S3Client({ endpoint: server.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: MINIO.accessKey, secretAccessKey: MINIO.secretKey } });
      await admin.send(new CreateBucketCommand({ Bucket: 'rot' }));
      const url = 's3://rot/p';
      // The worker's store: it keeps the keys it started with (the SDK caches what its chain found).
      const store = new S3ArtifactStore({ url, endpoint: server.endpoint }, cache);
      const { recordStep } = createMetricsActivities({ store: new LocalArtifactStore('/nonexistent'), logger });
      const s0 = stepAndState('rot-1', 0, url);
      // The metrics activity reads the run's store from the state's settings: point them at this server.
      const withEndpoint = (x: typeof s0) => ({ record: x.record, state: { ...x.state, artifacts: { url, endpoint: server.endpoint } } });
      await recordStep(withEndpoint(s0));

      // Rotated: the server now has other keys; this host's are refused.
      await server.stop();
      await server.start('rotated-secret-2');
      const err = await failureOf(recordStep(withEndpoint(stepAndState('rot-1', 1, url))));
      expect(err).toBeInstanceOf(ApplicationFailure);
      expect((err as ApplicationFailure).type).toBe('StoreUnavailable');
      expect((err as ApplicationFailure).message).toMatch(/refused the request \((InvalidAccessKeyId|SignatureDoesNotMatch).*waiting-for-store.*Fix: give this host valid keys/s);
      // Before a run starts, the same refusal is the config to fix.
      const fresh = new S3ArtifactStore({ url, endpoint: server.endpoint }, cache);
      const pre = await failureOf(checkStore(fresh));
      expect(pre).toBeInstanceOf(StoreConfigError);
      expect(String(pre)).toMatch(/refused this host's credentials.*Fix: check AWS_ACCESS_KEY_ID/);

      // Restored: the same call goes through, and step 1 is on record once.
      await server.stop();
      await server.start(MINIO.secretKey);
      await recordStep(withEndpoint(stepAndState('rot-1', 1, url)));
      expect((await readStepRecords(store, 'rot-1')).map((r) => r.step)).toEqual([0, 1]);
    } finally {
      await server.stop();
    }
  });

  test('the soak\'s store-credentials incident: its MinIO user disabled, a write is StoreUnavailable naming InvalidAccessKeyId; enabled again, it goes through', async () => {
    const server = new PrivateMinio(await freePort());
    let putBack = () => {};
    let incident: Promise<void> | undefined;
    try {
      await server.start(MINIO.secretKey);
      const admin = new S3Client({ endpoint: server.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: MINIO.accessKey, secretAccessKey: MINIO.secretKey } });
      await admin.send(new CreateBucketCommand({ Bucket: 'soak' }));
      const soak = await createSoakStore('p', { endpoint: server.endpoint, bucket: 'soak', rootUser: MINIO.accessKey, rootPassword: MINIO.secretKey }, 'soak-user');
      expect(soak.artifacts).toEqual({ url: 's3://soak/p', endpoint: server.endpoint });
      // This process is a worker of the soak's stack: its SDK finds the soak user's key in its environment.
      putBack = swapAwsEnv(storeKeyEnv(soak));
      const store = new S3ArtifactStore(soak.artifacts, cache);
      const { recordStep } = createMetricsActivities({ store: new LocalArtifactStore('/nonexistent'), logger });
      const at = (step: number) => { const x = stepAndState('cred-1', step, soak.artifacts.url); return { record: x.record, state: { ...x.state, artifacts: soak.artifacts } }; };
      await recordStep(at(0));

      incident = injectFault('store-credentials', { hangMs: 0, restartDelayMs: 0, incidentMs: 4_000, store: soak, logger });
      let refused: unknown;
      for (let i = 0; i < 40 && !refused; i++) {
        // A GET: a refused HEAD has no body, so no error code to name.
        refused = await failureOf(store.read('probe'));
        if (!refused) await new Promise((r) => setTimeout(r, 100));
      }
      // A 403 from the store that answered: the refusal a wait is made of, not a config error, naming the store's error.
      expect(refused).toBeInstanceOf(StoreRefusedError);
      expect((refused as StoreRefusedError).storeError).toMatch(/^InvalidAccessKeyId: .*disabled/);
      const err = await failureOf(recordStep(at(1)));
      expect((err as ApplicationFailure).type).toBe('StoreUnavailable');
      expect((err as ApplicationFailure).message).toMatch(/refused the request \(InvalidAccessKeyId.*waiting-for-store.*Fix: give this host valid keys/s);

      // The operator's repair: the same key accepted again, by the same client, and step 1 is on record once.
      await incident;
      await recordStep(at(1));
      expect((await readStepRecords(store, 'cred-1')).map((r) => r.step)).toEqual([0, 1]);
    } finally {
      putBack();
      await incident?.catch(() => undefined);
      await server.stop();
    }
  });

  test('bucket removed mid-run: StoreUnavailable naming NoSuchBucket; recreated: the same write goes through; preflight: a config error', async () => {
    const bucket = `ratchet-i39-${process.pid}`;
    const admin = new S3Client({ endpoint: MINIO.endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId: MINIO.accessKey, secretAccessKey: MINIO.secretKey } });
    await admin.send(new CreateBucketCommand({ Bucket: bucket }));
    const url = `s3://${bucket}/p`;
    const settings = { url, endpoint: MINIO.endpoint };
    const store = new S3ArtifactStore(settings, cache);
    const { recordStep } = createMetricsActivities({ store: new LocalArtifactStore('/nonexistent'), logger });
    const at = (step: number) => { const x = stepAndState('gone-1', step, url); return { record: x.record, state: { ...x.state, artifacts: settings } }; };
    await recordStep(at(0));

    const listed = await admin.send(new ListObjectsV2Command({ Bucket: bucket }));
    await admin.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: (listed.Contents ?? []).map((o) => ({ Key: o.Key! })) } }));
    await admin.send(new DeleteBucketCommand({ Bucket: bucket }));
    const err = await failureOf(recordStep(at(1)));
    expect((err as ApplicationFailure).type).toBe('StoreUnavailable');
    expect((err as ApplicationFailure).message).toMatch(/refused the request \(NoSuchBucket.*waiting-for-store.*Fix: the bucket "ratchet-i39-\d+" is gone/s);
    const pre = await failureOf(checkStore(store));
    expect(pre).toBeInstanceOf(StoreConfigError);
    expect(String(pre)).toMatch(/bucket "ratchet-i39-\d+" does not exist.*Fix: create it/);

    await admin.send(new CreateBucketCommand({ Bucket: bucket }));
    await recordStep(at(1));
    expect((await readStepRecords(store, 'gone-1')).map((r) => r.step)).toEqual([1]);
    const left = await admin.send(new ListObjectsV2Command({ Bucket: bucket }));
    await admin.send(new DeleteObjectsCommand({ Bucket: bucket, Delete: { Objects: (left.Contents ?? []).map((o) => ({ Key: o.Key! })) } }));
    await admin.send(new DeleteBucketCommand({ Bucket: bucket }));
  });
});
