/**
 * The S3 download cache is an LRU bounded by bytes (issue 42, src/artifacts/cache.ts): least recently used
 * entries go after a download, never the one handed out, one used in the last 10 minutes, or an adapter a
 * vLLM replica serves (weight sync records those). S3 and vLLM are in-memory fakes here; the real MinIO
 * path is test/integration/trainrun-s3.test.ts.
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { CACHE_IN_USE_MS, CACHE_LIMIT_ENV, SERVED_FILE, cacheEntries, cacheLimitBytes, pruneCache, recordServed } from '../../../src/artifacts/cache';
import { StoreConfigError } from '../../../src/artifacts/errors';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { S3ArtifactStore } from '../../../src/artifacts/s3';
import { sha256 } from '../../../src/artifacts/store';
import { storeFor } from '../../../src/artifacts/stores';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createWeightSyncActivities } from '../../../src/activities/weightSync';

const HOUR = 3_600_000;

/** A committed entry of `bytes` bytes, last used `ageMs` ago. */
function entry(root: string, key: string, bytes: number, ageMs: number): string {
  const dir = path.join(root, 'bkt', key, 'ab'.repeat(8));
  mkdirSync(dir, { recursive: true });
  writeFileSync(path.join(dir, 'w.bin'), Buffer.alloc(bytes, 1));
  writeFileSync(path.join(dir, 'MANIFEST.sha256'), '');
  const t = new Date(Date.now() - ageMs);
  utimesSync(dir, t, t);
  return dir;
}

/** An S3 client answering GetObject from a map (key -> bytes, with the sha256 metadata the store writes). */
function fakeS3(store: S3ArtifactStore, objects: Map<string, Buffer>): string[] {
  const gets: string[] = [];
  (store.client as unknown as { send: (c: { constructor: { name: string }; input: { Key: string } }) => Promise<unknown> }).send = async (cmd) => {
    if (cmd.constructor.name !== 'GetObjectCommand') throw new Error(`unexpected ${cmd.constructor.name}`);
    const body = objects.get(cmd.input.Key);
    if (!body) throw Object.assign(new Error('no such key'), { name: 'NoSuchKey', $metadata: { httpStatusCode: 404 } });
    gets.push(cmd.input.Key);
    return { Body: { transformToByteArray: async () => new Uint8Array(body) }, Metadata: { sha256: sha256(body) } };
  };
  return gets;
}

/** An adapter as the trainer uploads it: its file and MANIFEST.sha256 under `p/<key>`; the ref's sha256 is the manifest's. */
function putAdapter(objects: Map<string, Buffer>, key: string, bytes: number): ArtifactRef {
  const weights = Buffer.alloc(bytes, key.length);
  const manifest = Buffer.from(`${sha256(weights)}  adapter_model.safetensors\n`);
  objects.set(`p/${key}/adapter_model.safetensors`, weights);
  objects.set(`p/${key}/MANIFEST.sha256`, manifest);
  return { uri: `s3://bkt/p/${key}`, sha256: sha256(manifest), bytes };
}

const age = (dir: string, ms: number) => { const t = new Date(Date.now() - ms); utimesSync(dir, t, t); };

describe('the S3 download cache', () => {
  const saved = process.env[CACHE_LIMIT_ENV];
  afterEach(() => { if (saved === undefined) delete process.env[CACHE_LIMIT_ENV]; else process.env[CACHE_LIMIT_ENV] = saved; });

  it('evicts least recently used entries down to the bound, sparing kept, served and in-use entries', async () => {
    const root = mkdtempSync(path.join(tmpdir(), 'ratchet-cache-'));
    const oldest = entry(root, 'runs/r/checkpoints/step-1', 3000, 5 * HOUR);
    const served = entry(root, 'runs/r/checkpoints/step-2/adapter', 2500, 4 * HOUR);
    const older = entry(root, 'runs/r/checkpoints/step-2', 2000, 3 * HOUR);
    const kept = entry(root, 'runs/r/checkpoints/step-3', 1000, 2 * HOUR);
    const inUse = entry(root, 'runs/r/checkpoints/step-4', 4000, CACHE_IN_USE_MS / 2);
    mkdirSync(path.join(root, 'bkt', 'runs', 'r', 'x.tmp-1'));  // a download in progress: neither counted nor touched
    await recordServed(root, 'http://r1/v1', [served, '/elsewhere/not-this-cache']);
    expect(JSON.parse(readFileSync(path.join(root, SERVED_FILE), 'utf8'))).toEqual({ 'http://r1/v1': [served] });
    expect((await cacheEntries(root)).map((e) => e.dir)).toEqual([oldest, served, older, kept, inUse]);

    // 12,500 bytes held, bound 7,000: oldest (3,000) and older (2,000) go, leaving 7,500 of entries that may not go.
    const gone = await pruneCache(root, 7000, { keep: [kept] });
    expect(gone.map((e) => [e.dir, e.bytes])).toEqual([[oldest, 3000], [older, 2000]]);
    expect([existsSync(oldest), existsSync(older), existsSync(served), existsSync(kept), existsSync(inUse)]).toEqual([false, false, true, true, true]);
    expect(existsSync(path.join(root, 'bkt', 'runs', 'r', 'checkpoints', 'step-1'))).toBe(false);  // its empty folders too
    expect(existsSync(path.join(root, 'bkt', 'runs', 'r', 'x.tmp-1'))).toBe(true);

    // The replica no longer serves it (unloaded): then it may go, the in-use one still not.
    await recordServed(root, 'http://r1/v1', []);
    expect((await pruneCache(root, 0)).map((e) => e.dir)).toEqual([served, kept]);
    expect(existsSync(inUse)).toBe(true);
  });

  it('the bound is $RATCHET_CACHE_MAX_GIB (default 20 GiB); a bad value names the variable and the fix', () => {
    expect(cacheLimitBytes({})).toBe(20 * 2 ** 30);
    expect(cacheLimitBytes({ [CACHE_LIMIT_ENV]: '0.5' })).toBe(2 ** 29);
    expect(() => cacheLimitBytes({ [CACHE_LIMIT_ENV]: 'lots' })).toThrow(StoreConfigError);
    expect(() => cacheLimitBytes({ [CACHE_LIMIT_ENV]: '-1' })).toThrow(/RATCHET_CACHE_MAX_GIB="-1" is not a size in GiB >= 0\. Fix: e\.g\./);
  });

  it('localDir bounds the cache after a download; a hit marks its entry used', async () => {
    const cacheRoot = mkdtempSync(path.join(tmpdir(), 'ratchet-cache-'));
    const store = new S3ArtifactStore({ url: 's3://bkt/p', endpoint: 'http://minio:9000' }, cacheRoot);
    const objects = new Map<string, Buffer>();
    const gets = fakeS3(store, objects);
    const a = putAdapter(objects, 'runs/r/checkpoints/step-1-aaaa/adapter', 4000);
    const b = putAdapter(objects, 'runs/r/checkpoints/step-2-bbbb/adapter', 4000);
    process.env[CACHE_LIMIT_ENV] = String(6000 / 2 ** 30);
    const dirA = await store.localDir(a);
    age(dirA, HOUR);
    const dirB = await store.localDir(b);
    expect([existsSync(dirA), existsSync(dirB)]).toEqual([false, true]);
    // Wanted again: downloaded again (a manifest and a file per download: 6 gets), and b, fresh, stays.
    const again = await store.localDir(a);
    expect(again).toBe(dirA);
    expect(gets).toHaveLength(6);
    expect(existsSync(dirB)).toBe(true);
    // A hit is no download, and marks the entry used.
    age(dirB, HOUR);
    expect(await store.localDir(b)).toBe(dirB);
    expect(gets).toHaveLength(6);
    expect(Date.now() - (await cacheEntries(cacheRoot)).find((e) => e.dir === dirB)!.usedMs).toBeLessThan(60_000);
  });

  it('weight sync records what each replica serves, and the cache keeps it while it is served', async () => {
    const home = mkdtempSync(path.join(tmpdir(), 'ratchet-home-'));
    const savedHome = process.env.RATCHET_HOME;
    process.env.RATCHET_HOME = home;
    try {
      const settings = { url: 's3://bkt/p', endpoint: 'http://minio-cache-test:9000' };
      const store = storeFor(settings, new LocalArtifactStore(home)) as S3ArtifactStore;
      const objects = new Map<string, Buffer>();
      fakeS3(store, objects);
      // A vLLM that keeps what it loads: /models reports each adapter's directory as its root.
      const roots = new Map<string, string>();
      const fetchFn = (async (url: string, init?: RequestInit) => {
        const route = url.slice(url.lastIndexOf('/') + 1);
        const body = init?.body ? JSON.parse(String(init.body)) as { lora_name: string; lora_path?: string } : undefined;
        if (route === 'models') return new Response(JSON.stringify({ data: [{ id: 'base' }, ...[...roots].map(([id, root]) => ({ id, root }))] }));
        if (route === 'load_lora_adapter') { roots.set(body!.lora_name, body!.lora_path!); return new Response('ok'); }
        if (route === 'unload_lora_adapter') { roots.delete(body!.lora_name); return new Response('ok'); }
        return new Response('not found', { status: 404 });
      }) as typeof fetch;
      const sync = createWeightSyncActivities({ logger: pino({ level: 'silent' }), fetch: fetchFn, replicaRetryMs: 50, sleep: async () => {} });
      process.env[CACHE_LIMIT_ENV] = '0';
      const v1 = putAdapter(objects, 'runs/r/checkpoints/step-0-aaaa/adapter', 3000);
      const v2 = putAdapter(objects, 'runs/r/checkpoints/step-1-bbbb/adapter', 3000);
      await sync.syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 1, adapter: v1, keepFromVersion: 1, artifacts: settings });
      const dir1 = roots.get('r/policy-v1')!;
      expect(dir1.startsWith(store.cacheRoot)).toBe(true);
      // An hour later (no longer in use by a fetch), version 2 is synced with version 1 still kept (keepFromVersion 1).
      age(dir1, HOUR);
      await sync.syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 2, adapter: v2, keepFromVersion: 1, artifacts: settings });
      expect(existsSync(dir1)).toBe(true);  // bound 0, but vLLM serves it
      const dir2 = roots.get('r/policy-v2')!;
      expect(JSON.parse(readFileSync(path.join(store.cacheRoot, SERVED_FILE), 'utf8'))).toEqual({ 'http://r1/v1': [dir1, dir2].sort() });
      // Version 3 drops version 1 from vLLM: the next download may evict its copy.
      const v3 = putAdapter(objects, 'runs/r/checkpoints/step-2-cccc/adapter', 3000);
      await sync.syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 3, adapter: v3, keepFromVersion: 2, artifacts: settings });
      expect(roots.has('r/policy-v1')).toBe(false);
      age(dir2, HOUR);
      const v4 = putAdapter(objects, 'runs/r/checkpoints/step-3-dddd/adapter', 3000);
      await sync.syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 4, adapter: v4, keepFromVersion: 3, artifacts: settings });
      expect([existsSync(dir1), existsSync(dir2)]).toEqual([false, true]);  // dir2 was served when v4 was fetched
    } finally {
      if (savedHome === undefined) delete process.env.RATCHET_HOME; else process.env.RATCHET_HOME = savedHome;
    }
  });
});
