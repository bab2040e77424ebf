/**
 * The S3 artifact store against a real MinIO (infra/minio.sh): round trips, the
 * sha256 check on read, directory artifacts, retention's listing and deletes, and the
 * bad-input errors a run gets before it starts (wrong bucket, refused credentials,
 * unreachable endpoint).
 */
import { mkdtempSync, promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { PutObjectCommand } from '@aws-sdk/client-s3';
import { StoreConfigError, StoreUnavailableError } from '../../src/artifacts/errors';
import { S3ArtifactStore } from '../../src/artifacts/s3';
import { ArtifactIntegrityError, LocalArtifactStore } from '../../src/artifacts/store';
import { checkStore, storeFor } from '../../src/artifacts/stores';
import { createConfigActivities } from '../../src/activities/config';
import { createMetricsActivities, readStepRecords } from '../../src/activities/metrics';
import { StepRecord } from '../../src/contracts';
import type { ArtifactRef } from '../../src/artifacts/ref';
import { runKeys } from '../../src/artifacts/keys';
import { applyRetention, listForRetention, planRetention, prunedCheckpoints } from '../../src/records/retention';
import { readRunState } from '../../src/records/runRecords';
import { componentLogger } from '../../src/shared/logger';
import { MINIO, describeWithStack, useMinioCredentials } from '../helpers/stack';

const prefix = `test-${process.pid}-${Date.now()}`;
const lastSegment = (uri: string) => uri.split('/').pop()!;
const settings = () => ({ url: `s3://${MINIO.bucket}/${prefix}`, endpoint: MINIO.endpoint });

describeWithStack('S3 artifact store (real MinIO)', ['minio'], () => {
  let store: S3ArtifactStore;
  const cache = mkdtempSync(path.join(os.tmpdir(), 'ratchet-s3cache-'));

  beforeAll(() => {
    useMinioCredentials();
    store = new S3ArtifactStore(settings(), cache);
  });

  test('put/get round trip; the ref is an s3:// uri with the sha256 and size', async () => {
    const ref = await store.putJson('runs/r1/config.json', { a: 1 });
    expect(ref.uri).toBe(`s3://${MINIO.bucket}/${prefix}/runs/r1/config.json`);
    expect(ref.bytes).toBe(7);
    expect(await store.getJson(ref)).toEqual({ a: 1 });
    expect(await store.exists('runs/r1/config.json')).toEqual(ref);
    expect(await store.exists('runs/r1/nope.json')).toBeUndefined();
    expect((await store.read('runs/r1/config.json'))!.toString()).toBe('{"a":1}');
    expect(await store.read('runs/r1/nope.json')).toBeUndefined();
    expect(await store.list('runs/r1')).toEqual(['runs/r1/config.json']);
  });

  test('a changed object fails the sha256 check on read, naming the uri and both hashes', async () => {
    const ref = await store.put('runs/r1/steps/0/batch.json', 'hello');
    // Someone overwrites the object behind the store's back (same key, metadata claims the old hash).
    await store.client.send(new PutObjectCommand({ Bucket: MINIO.bucket, Key: `${prefix}/runs/r1/steps/0/batch.json`, Body: 'hellO', Metadata: { sha256: ref.sha256 } }));
    await expect(store.get(ref)).rejects.toThrow(ArtifactIntegrityError);
    await expect(store.get(ref)).rejects.toThrow(/recorded sha256 [0-9a-f]{64}, found [0-9a-f]{64}.*Fix:/);
    await expect(store.read('runs/r1/steps/0/batch.json')).rejects.toThrow(ArtifactIntegrityError);
  });

  test('a directory artifact uploads with its manifest and comes back verified into the local cache', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-adapter-'));
    await fs.writeFile(path.join(dir, 'adapter_config.json'), '{"r":8}');
    await fs.mkdir(path.join(dir, 'sub'));
    await fs.writeFile(path.join(dir, 'sub', 'w.bin'), Buffer.alloc(1000, 7));
    const ref = await store.putDir('runs/r1/checkpoints/step-0/adapter', dir);
    expect(ref.bytes).toBe(1007);
    const local = await store.localDir(ref);
    expect(local.startsWith(cache)).toBe(true);
    expect(await fs.readFile(path.join(local, 'sub', 'w.bin'))).toEqual(Buffer.alloc(1000, 7));
    // Matches the local backend byte for byte: same manifest, same ref hash.
    const localRef = await new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-l-'))).putDir('a', dir);
    expect(localRef.sha256).toBe(ref.sha256);
    // A damaged file in the store is caught on a fresh fetch.
    await store.client.send(new PutObjectCommand({ Bucket: MINIO.bucket, Key: `${prefix}/runs/r1/checkpoints/step-0/adapter/sub/w.bin`, Body: 'x' }));
    const fresh = new S3ArtifactStore(settings(), mkdtempSync(path.join(os.tmpdir(), 'ratchet-s3cache2-')));
    await expect(fresh.localDir(ref)).rejects.toThrow(/sub\/w.bin is corrupt/);
  });

  test('putIfAbsent is a conditional put: the first writer creates the key, a second (other bytes) leaves it as it was', async () => {
    const first = await store.putIfAbsent('runs/r3/records/steps/0-aaaa.json', 'first');
    expect(first.created).toBe(true);
    const second = await store.putIfAbsent('runs/r3/records/steps/0-aaaa.json', 'stale attempt');
    expect(second).toEqual({ created: false, ref: first.ref });
    expect((await store.read('runs/r3/records/steps/0-aaaa.json'))!.toString()).toBe('first');
  });

  test('step records are appended objects (the count grows, earlier ones unchanged); a stale attempt cannot roll the state back', async () => {
    const metrics = createMetricsActivities({ store: new LocalArtifactStore('/nonexistent'), logger: componentLogger('test') });
    const record = StepRecord.parse({ format: 'ratchet.step/v1', run_id: 'r4', step: 0, time: '2026-01-01T00:00:00.000Z', mean_reward: 0.5, rollouts: 1, policy_version: 1 });
    const state = { format: 'ratchet.run-state/v1', runId: 'r4', configSha256: 'x', completedStep: 0, nextStep: 1, policyVersion: 1, configRef: { uri: 's3://x/y', sha256: 'a'.repeat(64), bytes: 1 }, seed: 1, artifacts: settings() } as const;
    await metrics.recordStep({ record, state: { ...state } });
    const [firstKey] = await store.list('runs/r4/records/steps');
    const firstBytes = await store.read(firstKey!);
    await metrics.recordStep({ record: { ...record, step: 1, time: '2026-01-01T00:01:00.000Z' }, state: { ...state, completedStep: 1, nextStep: 2 } });
    await metrics.recordStep({ record, state: { ...state } }); // step 0's stale attempt, finishing late
    expect(await store.list('runs/r4/records/steps')).toHaveLength(2);
    expect(await store.read(firstKey!)).toEqual(firstBytes);
    expect((await readRunState(store, 'r4'))!.nextStep).toBe(2);
    expect(JSON.parse((await store.read('runs/r4/state.json'))!.toString()).nextStep).toBe(2);
  });

  test('step records and run state go through the store (appended, once per step)', async () => {
    const metrics = createMetricsActivities({ store: new LocalArtifactStore('/nonexistent'), logger: componentLogger('test') });
    const record = StepRecord.parse({ format: 'ratchet.step/v1', run_id: 'r2', step: 0, time: '2026-01-01T00:00:00.000Z', mean_reward: 0.5, rollouts: 1, policy_version: 1 });
    const state = { format: 'ratchet.run-state/v1', runId: 'r2', configSha256: 'x', completedStep: 0, nextStep: 1, policyVersion: 1, configRef: { uri: 's3://x/y', sha256: 'a'.repeat(64), bytes: 1 }, seed: 1, artifacts: settings() } as const;
    await metrics.recordStep({ record, state: { ...state } });
    await metrics.recordStep({ record, state: { ...state } });
    await metrics.recordStep({ record: { ...record, step: 1 }, state: { ...state, completedStep: 1, nextStep: 2 } });
    expect((await readStepRecords(store, 'r2')).map((r) => r.step)).toEqual([0, 1]);
    expect(JSON.parse((await store.read('runs/r2/state.json'))!.toString()).nextStep).toBe(2);
  });

  test('retention on a run in MinIO: sizes listed over pages, deletes in batches of 1000, and what must stay stays whole (issue 42)', async () => {
    const runId = 'ret1';
    const src = mkdtempSync(path.join(os.tmpdir(), 'ratchet-ckpt-'));
    await fs.mkdir(path.join(src, 'adapter'));
    await fs.writeFile(path.join(src, 'adapter', 'adapter_model.safetensors'), Buffer.alloc(3000, 1));
    await fs.writeFile(path.join(src, 'optimizer.pt'), Buffer.alloc(5000, 2));
    const records: StepRecord[] = [];
    for (const step of [0, 1, 2]) {
      const key = runKeys.checkpoint(runId, step, `${step}`.repeat(64));
      const adapter = await store.putDir(`${key}/adapter`, path.join(src, 'adapter'));
      const checkpoint = await store.putDir(key, src);
      records.push(StepRecord.parse({ format: 'ratchet.step/v1', run_id: runId, step, time: `2026-01-01T00:0${step}:00.000Z`, mean_reward: 0, rollouts: 1, policy_version: step + 1, checkpoint, adapter }));
    }
    // Step 1's turn journal in 1,100 parts (more than one list page and one DeleteObjects batch), and its trajectory.
    const journal = Array.from({ length: 1100 }, (_, t) => runKeys.rolloutJournalTurn(runId, 1, 'g0', 0, t, 'a1'));
    for (let i = 0; i < journal.length; i += 50) await Promise.all(journal.slice(i, i + 50).map((k) => store.put(k, 'turn')));
    await store.put(runKeys.trajectory(runId, 1, 'g0', 0, 'ab'.repeat(32)), 'trajectory');
    const before = (await store.listSized(`runs/${runId}`)).map((o) => o.key);
    expect(before.length).toBeGreaterThan(1100);
    const state = { completedStep: 2, checkpoint: records[2]!.checkpoint as ArtifactRef };
    const input = { runId, records, state, policy: { keep_last: 2, keep_every: 0, journals: true } };
    const plan = planRetention({ ...input, keys: await listForRetention(store, runId) });
    // Read off the listing, apart from the plan: step 0's checkpoint (older than the newest 2) and every journal part.
    const step0 = lastSegment(records[0]!.checkpoint!.uri);
    const expected = before.filter((k) => k.includes(`/checkpoints/${step0}/`) || k.includes('.journal/')).sort();
    expect(expected.length).toBe(1100 + 4);  // the journal, and the checkpoint's optimizer, manifest, adapter file and adapter manifest
    expect(plan.delete.map((d) => d.key).sort()).toEqual(expected);

    const record = await applyRetention(store, { ...input, by: 'gc', time: '2026-01-01T01:00:00.000Z' }, plan);
    expect(record.deleted.keys).toBe(expected.length);
    const after = (await store.listSized(`runs/${runId}`)).map((o) => o.key);
    expect(after.filter((k) => !before.includes(k)).map((k) => path.posix.dirname(k))).toEqual([`runs/${runId}/records/retention`]);
    expect(after.filter((k) => before.includes(k))).toEqual(before.filter((k) => !expected.includes(k)));
    // The newest two checkpoints and every adapter but step 0's download whole into a fresh cache; the trajectory stays.
    const reader = new S3ArtifactStore(settings(), mkdtempSync(path.join(os.tmpdir(), 'ratchet-s3cache-ret-')));
    for (const r of records.slice(1)) for (const ref of [r.checkpoint, r.adapter] as ArtifactRef[]) await reader.localDir(ref);
    await expect(reader.localDir(records[0]!.checkpoint as ArtifactRef)).rejects.toThrow(ArtifactIntegrityError);
    expect(after.some((k) => k.startsWith(`runs/${runId}/steps/1/rollouts/g0/0-`))).toBe(true);
    expect([...(await prunedCheckpoints(store, runId))]).toEqual([records[0]!.checkpoint!.sha256]);
  }, 120_000);

  test('preflight: a missing bucket is named with the fix', async () => {
    const bad = new S3ArtifactStore({ url: 's3://no-such-bucket-ratchet/x', endpoint: MINIO.endpoint }, cache);
    const err = await checkStore(bad).then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(StoreConfigError);
    expect(String(err)).toMatch(/\[artifacts\] url: bucket "no-such-bucket-ratchet" does not exist.*Fix:/);
  });

  test('preflight: refused credentials are named with the fix (and never read from the config)', async () => {
    const saved = process.env.AWS_SECRET_ACCESS_KEY;
    process.env.AWS_SECRET_ACCESS_KEY = 'wrong-secret';
    try {
      const s = new S3ArtifactStore(settings(), cache);
      await expect(checkStore(s)).rejects.toThrow(/refused this host's credentials.*Fix: check AWS_ACCESS_KEY_ID/);
    } finally {
      process.env.AWS_SECRET_ACCESS_KEY = saved;
    }
  });

  test('preflight: missing credentials are named with the fix', async () => {
    const saved = { id: process.env.AWS_ACCESS_KEY_ID, key: process.env.AWS_SECRET_ACCESS_KEY, home: process.env.HOME };
    delete process.env.AWS_ACCESS_KEY_ID;
    delete process.env.AWS_SECRET_ACCESS_KEY;
    process.env.HOME = mkdtempSync(path.join(os.tmpdir(), 'ratchet-nohome-'));  // no ~/.aws either
    process.env.AWS_EC2_METADATA_DISABLED = 'true';  // nor an instance role
    try {
      const s = new S3ArtifactStore(settings(), cache);
      await expect(checkStore(s)).rejects.toThrow(/no AWS credentials on this host.*Fix: export AWS_ACCESS_KEY_ID/);
    } finally {
      process.env.AWS_ACCESS_KEY_ID = saved.id;
      process.env.AWS_SECRET_ACCESS_KEY = saved.key;
      process.env.HOME = saved.home;
    }
  });

  test('an unreachable endpoint is StoreUnavailable (the run waits), not a config error', async () => {
    const s = new S3ArtifactStore({ url: `s3://${MINIO.bucket}/x`, endpoint: 'http://127.0.0.1:9' }, cache);
    const err = await s.put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(String(err)).toMatch(/unreachable.*waiting-for-store/);
  });

  test('openRun stores the config in the run\'s S3 store, and refuses a wrong bucket before the run starts', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-cfg-'));
    const good = path.join(dir, 'good.toml');
    await fs.writeFile(good, `[[env]]\nid = "swe-grep"\n[artifacts]\nurl = "${settings().url}"\nendpoint = "${MINIO.endpoint}"\n`);
    const acts = createConfigActivities({ store: new LocalArtifactStore('/nonexistent'), logger: componentLogger('test') });
    const opened = await acts.openRun({ configPath: good, runId: 'r3' });
    expect(opened.loaded.configRef.uri).toBe(`s3://${MINIO.bucket}/${prefix}/runs/r3/config.json`);
    expect((await acts.readConfig(opened.loaded.configRef, settings())).artifacts.url).toBe(settings().url);
    expect(await storeFor(settings(), store).exists('runs/r3/config.json')).toBeDefined();

    const bad = path.join(dir, 'bad.toml');
    await fs.writeFile(bad, `[[env]]\nid = "swe-grep"\n[artifacts]\nurl = "s3://no-such-bucket-ratchet/p"\nendpoint = "${MINIO.endpoint}"\n`);
    await expect(acts.openRun({ configPath: bad, runId: 'r4' })).rejects.toMatchObject({
      type: 'StoreConfigError', message: expect.stringMatching(/bucket "no-such-bucket-ratchet" does not exist.*Fix:/),
    });
  });
});
