/**
 * The S3 artifact store (src/artifacts/s3.ts), its S3 client faked in the SDK's shape.
 *
 * The "store refusals: waits mid-run, config errors at the start" block:
 * Issue 39, item 4: a store that answers but refuses (keys rotated or expired, a token expired, the
 * host's clock off, the bucket gone) is, mid-run, a StoreUnavailable the run waits on, with the store's
 * error named; before a run starts (checkStore) it stays a StoreConfigError naming the setting. The
 * S3 client's answers are faked here in the SDK's shape; test/integration/store-refusals.test.ts has
 * the real MinIO.
 *
 * The "S3 directory artifacts with large objects" block:
 * A directory artifact's large objects (a full fine-tuning checkpoint's model/model.safetensors: GiBs, past
 * what one Buffer holds) are streamed from S3 to the cache and hashed on the way (issue 41). The S3 client is
 * faked in the SDK's shape: a Node stream body with its ContentLength, as the real SDK answers on Node.
 */
import { S3ServiceException } from '@aws-sdk/client-s3';
import { StoreConfigError, StoreRefusedError, StoreUnavailableError } from '../../../src/artifacts/errors';
import { S3ArtifactStore, STREAM_OBJECT_BYTES } from '../../../src/artifacts/s3';
import { asActivityFailure, checkStore } from '../../../src/artifacts/stores';
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { sha256 } from '../../../src/artifacts/store';

describe('store refusals: waits mid-run, config errors at the start', () => {
  /** A store whose every S3 call fails with the SDK error `name` / `status`. */
  function refusing(name: string, status: number): S3ArtifactStore {
    const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, '/tmp/ratchet-unused-cache');
    const err = new S3ServiceException({ name, $fault: status >= 500 ? 'server' : 'client', $metadata: { httpStatusCode: status }, message: `${name}: the store says no` });
    (store.client as unknown as { send: () => Promise<never> }).send = () => Promise.reject(err);
    return store;
  }

  it.each([
    ['InvalidAccessKeyId', 403, /give this host valid keys/],
    ['SignatureDoesNotMatch', 403, /give this host valid keys/],
    ['AccessDenied', 403, /give this host valid keys/],
    ['ExpiredToken', 400, /give this host valid keys/],
    ['RequestTimeTooSkewed', 403, /sync this host's clock/],
    ['NoSuchBucket', 404, /bucket "bkt" is gone/],
    ['Forbidden', 403, /give this host valid keys/],
  ])('%s (HTTP %i) mid-run: StoreUnavailable naming it; at the start: StoreConfigError', async (name, status, fix) => {
    const err = await refusing(name, status).put('runs/r/x.json', '{}').then(() => undefined, (e: unknown) => e);
    expect(err).toBeInstanceOf(StoreUnavailableError);
    expect(err).toBeInstanceOf(StoreRefusedError);
    expect((err as Error).message).toContain(`refused the request (${name}`);
    expect((err as Error).message).toMatch(/waiting-for-store/);
    expect((err as Error).message).toMatch(fix);
    // What an activity reports: the type the workflow waits on.
    expect(asActivityFailure(err)).toMatchObject({ type: 'StoreUnavailable', message: expect.stringContaining(name) });
    const pre = await checkStore(refusing(name, status)).then(() => undefined, (e: unknown) => e);
    expect(pre).toBeInstanceOf(StoreConfigError);
    expect((pre as Error).message).toMatch(/^\[artifacts\] (url|region)/);
    expect((pre as Error).message).toMatch(/Fix:/);
  });

  it("a refused HEAD (no error body: the SDK's `Unknown`/`UnknownError`) is named by its HTTP status", async () => {
    const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, '/tmp/ratchet-unused-cache');
    const headAnswer = (status: number) => new S3ServiceException({ name: 'Unknown', $fault: status >= 500 ? 'server' : 'client', $metadata: { httpStatusCode: status }, message: 'UnknownError' });
    (store.client as unknown as { send: () => Promise<never> }).send = () => Promise.reject(headAnswer(403));
    const refused = await store.put('runs/r/x.json', '{}').then(() => undefined, (e: unknown) => e);
    expect(refused).toBeInstanceOf(StoreRefusedError);
    expect((refused as Error).message).toContain('HTTP 403: no error body');
    expect((refused as Error).message).not.toMatch(/UnknownError/);
    (store.client as unknown as { send: () => Promise<never> }).send = () => Promise.reject(headAnswer(503));
    const down = await store.put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(down).toBeInstanceOf(StoreUnavailableError);
    expect((down as Error).message).toContain('HTTP 503: no error body');
  });

  it('a 5xx stays StoreUnavailable without a refusal; a 400 of another kind is neither', async () => {
    const down = await refusing('InternalError', 500).put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(down).toBeInstanceOf(StoreUnavailableError);
    expect(down).not.toBeInstanceOf(StoreRefusedError);
    const bad = await refusing('InvalidArgument', 400).put('k', 'v').then(() => undefined, (e: unknown) => e);
    expect(bad).not.toBeInstanceOf(StoreUnavailableError);
  });
});

describe('S3 directory artifacts with large objects', () => {
  /**
   * GetObject from a map. Every body is a Node stream with the SDK's transformToByteArray mixed in (as on
   * Node), except that reading an object claimed large whole throws: that one must be streamed.
   */
  function fakeS3(store: S3ArtifactStore, objects: Map<string, Buffer>, contentLength: (key: string, body: Buffer) => number) {
    (store.client as unknown as { send: (c: { input: { Key: string } }) => Promise<unknown> }).send = async (cmd) => {
      const body = objects.get(cmd.input.Key);
      if (!body) throw Object.assign(new Error('no such key'), { name: 'NoSuchKey', $metadata: { httpStatusCode: 404 } });
      const length = contentLength(cmd.input.Key, body);
      const chunks = Array.from({ length: Math.ceil(body.length / 1000) }, (_, i) => body.subarray(i * 1000, (i + 1) * 1000));
      const Body = Object.assign(Readable.from(chunks), {
        transformToByteArray: async () => {
          if (length >= STREAM_OBJECT_BYTES) throw new Error(`${cmd.input.Key} read whole`);
          return new Uint8Array(body);
        },
      });
      return { Body, ContentLength: length, Metadata: { sha256: sha256(body) } };
    };
  }

  function put(objects: Map<string, Buffer>, weights: Buffer): { uri: string; sha256: string; bytes: number } {
    const config = Buffer.from('{"model_type": "llama"}');
    const manifest = Buffer.from(`${sha256(config)}  config.json\n${sha256(weights)}  model.safetensors\n`);
    objects.set('p/ckpt/model/config.json', config);
    objects.set('p/ckpt/model/model.safetensors', weights);
    objects.set('p/ckpt/model/MANIFEST.sha256', manifest);
    return { uri: 's3://bkt/p/ckpt/model', sha256: sha256(manifest), bytes: weights.length + config.length };
  }

  const weights = Buffer.from(Array.from({ length: 25_000 }, (_, i) => (i * 7) % 251));
  // Claimed large (the real ones are GiBs); the small config is read whole and must not be streamed.
  const large = (key: string, body: Buffer) => (key.endsWith('model.safetensors') ? STREAM_OBJECT_BYTES : body.length);

  test('are streamed to the cache, the bytes and their manifest intact', async () => {
    const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, mkdtempSync(path.join(tmpdir(), 's3-stream-')));
    const objects = new Map<string, Buffer>();
    const ref = put(objects, weights);
    fakeS3(store, objects, large);
    const dir = await store.localDir(ref);
    expect(readFileSync(path.join(dir, 'model.safetensors'))).toEqual(weights);
    expect(readFileSync(path.join(dir, 'config.json'), 'utf8')).toBe('{"model_type": "llama"}');
  });

  test('a streamed object whose bytes are not the manifest\'s is refused, and nothing is left in the cache', async () => {
    const cache = mkdtempSync(path.join(tmpdir(), 's3-stream-'));
    const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, cache);
    const objects = new Map<string, Buffer>();
    const ref = put(objects, weights);
    objects.set('p/ckpt/model/model.safetensors', Buffer.concat([weights.subarray(0, 100), Buffer.from('rot'), weights.subarray(103)]));
    fakeS3(store, objects, large);
    await expect(store.localDir(ref)).rejects.toThrow(/model\.safetensors is corrupt/);
    expect(readdirSync(path.join(cache, 'bkt', 'p', 'ckpt', 'model'))).toEqual([]);
  });
});
