/**
 * A directory artifact's large objects (a full fine-tuning checkpoint's model/model.safetensors: GiBs, past
 * what one Buffer holds) are streamed from S3 to the cache and hashed on the way (issue 41). The S3 client is
 * faked in the SDK's shape: a Node stream body with its ContentLength, as the real SDK answers on Node.
 */
import { mkdtempSync, readFileSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Readable } from 'node:stream';
import { STREAM_OBJECT_BYTES, S3ArtifactStore } from '../../../src/artifacts/s3';
import { sha256 } from '../../../src/artifacts/store';

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

describe('S3 directory artifacts with large objects', () => {
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
