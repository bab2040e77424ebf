import { createHash, randomBytes } from 'node:crypto';
import { createWriteStream, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  S3ServiceException,
} from '@aws-sdk/client-s3';
import { paths } from '../shared/paths';
import { cacheLimitBytes, pruneCache, touchEntry } from './cache';
import { StoreConfigError, StoreRefusedError, StoreUnavailableError } from './errors';
import type { ArtifactRef } from './ref';
import {
  ArtifactIntegrityError,
  MANIFEST,
  type ArtifactStore,
  type StoredKey,
  atomicWrite,
  checkKey,
  manifestEntries,
  manifestFor,
  sha256,
  verifyLocalDir,
} from './store';

export interface S3Settings {
  /** s3://bucket/prefix */
  url: string;
  endpoint?: string;
  region?: string;
  force_path_style?: boolean;
}

export function parseS3Url(url: string): { bucket: string; prefix: string } {
  const m = /^s3:\/\/([^/]+)\/?(.*)$/.exec(url);
  if (!m) throw new StoreConfigError(`"${url}" is not an s3:// url. Fix: [artifacts] url = "s3://bucket/prefix"`);
  return { bucket: m[1]!, prefix: m[2]!.replace(/\/+$/, '') };
}

/** Object metadata key for the sha256 every object carries (x-amz-meta-sha256). */
const SHA_META = 'sha256';

/** Objects this large are streamed to disk when a directory artifact is fetched (S3ArtifactStore.download). */
export const STREAM_OBJECT_BYTES = 256 * 2 ** 20;

/**
 * The S3 backend (AWS S3, MinIO, any S3-compatible store). A PutObject is atomic:
 * readers see the whole object or none; the body's sha256 goes along as the
 * object's checksum (the server verifies it on write) and as metadata (read back
 * by exists/read), and every get re-hashes what it received. Credentials come
 * from the SDK's default chain, never from the run config.
 */
export class S3ArtifactStore implements ArtifactStore {
  readonly url: string;
  readonly bucket: string;
  readonly prefix: string;
  readonly client: S3Client;

  constructor(readonly settings: S3Settings, readonly cacheRoot: string = path.join(paths.home(), 'cache', 's3')) {
    ({ bucket: this.bucket, prefix: this.prefix } = parseS3Url(settings.url));
    this.url = `s3://${this.bucket}${this.prefix ? `/${this.prefix}` : ''}`;
    this.client = new S3Client({
      endpoint: settings.endpoint,
      region: settings.region ?? process.env.AWS_REGION ?? process.env.AWS_DEFAULT_REGION ?? 'us-east-1',
      forcePathStyle: settings.force_path_style ?? settings.endpoint !== undefined,
      // A store that is down should fail an attempt in seconds: the workflow does the waiting.
      maxAttempts: 2,
      requestHandler: { connectionTimeout: 5_000, requestTimeout: 120_000 },
    });
  }

  objectKey(key: string): string {
    const k = checkKey(key);
    return this.prefix ? `${this.prefix}/${k}` : k;
  }

  uriOf(objectKey: string): string {
    return `s3://${this.bucket}/${objectKey}`;
  }

  /** The object key of an s3:// uri in this store's bucket. */
  keyOfUri(uri: string): string {
    const { bucket, prefix } = parseS3Url(uri);
    if (bucket !== this.bucket) {
      throw new StoreConfigError(`artifact ${uri} is in bucket "${bucket}", but this store is ${this.url}. Fix: read it with the store of the run that wrote it`);
    }
    return prefix;
  }

  async put(key: string, data: Buffer | string): Promise<ArtifactRef> {
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    const objectKey = this.objectKey(key);
    const digest = sha256(buf);
    await this.send(() => this.client.send(new PutObjectCommand({
      Bucket: this.bucket, Key: objectKey, Body: buf,
      ChecksumSHA256: Buffer.from(digest, 'hex').toString('base64'),
      Metadata: { [SHA_META]: digest },
    })), objectKey);
    return { uri: this.uriOf(objectKey), sha256: digest, bytes: buf.length };
  }

  putJson(key: string, value: unknown): Promise<ArtifactRef> {
    return this.put(key, JSON.stringify(value));
  }

  /** A conditional put (If-None-Match: *, AWS S3 and MinIO): 412 means another writer created the key first. */
  async putIfAbsent(key: string, data: Buffer | string): Promise<{ ref: ArtifactRef; created: boolean }> {
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    const objectKey = this.objectKey(key);
    const digest = sha256(buf);
    try {
      await this.send(() => this.client.send(new PutObjectCommand({
        Bucket: this.bucket, Key: objectKey, Body: buf, IfNoneMatch: '*',
        ChecksumSHA256: Buffer.from(digest, 'hex').toString('base64'),
        Metadata: { [SHA_META]: digest },
      })), objectKey);
      return { ref: { uri: this.uriOf(objectKey), sha256: digest, bytes: buf.length }, created: true };
    } catch (err) {
      const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
      const status = e.$metadata?.httpStatusCode;
      if (!(e.name === 'PreconditionFailed' || status === 412 || e.name === 'ConditionalRequestConflict' || status === 409)) throw err;
      const there = await this.exists(key);
      // 409: a concurrent conditional write of the key is under way and not yet visible; the caller retries.
      if (!there) throw new StoreUnavailableError(this.url, `${this.uriOf(objectKey)}: a concurrent conditional write is in progress; retry`);
      return { ref: there, created: false };
    }
  }

  async get(ref: ArtifactRef): Promise<Buffer> {
    const objectKey = this.keyOfUri(ref.uri);
    const got = await this.getObject(objectKey);
    if (!got) throw new ArtifactIntegrityError(ref.uri, ref.sha256, 'no such object');
    const actual = sha256(got.body);
    if (actual !== ref.sha256) throw new ArtifactIntegrityError(ref.uri, ref.sha256, actual);
    return got.body;
  }

  async getJson<T = unknown>(ref: ArtifactRef): Promise<T> {
    return JSON.parse((await this.get(ref)).toString('utf8')) as T;
  }

  async exists(key: string): Promise<ArtifactRef | undefined> {
    const objectKey = this.objectKey(key);
    try {
      const head = await this.send(() => this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey })), objectKey);
      const digest = head.Metadata?.[SHA_META];
      if (digest && /^[0-9a-f]{64}$/.test(digest)) return { uri: this.uriOf(objectKey), sha256: digest, bytes: head.ContentLength ?? 0 };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
    // Written by something else (no sha256 metadata): hash what is there.
    const buf = await this.read(key);
    return buf && { uri: this.uriOf(objectKey), sha256: sha256(buf), bytes: buf.length };
  }

  async read(key: string): Promise<Buffer | undefined> {
    const objectKey = this.objectKey(key);
    const got = await this.getObject(objectKey);
    if (!got) return undefined;
    if (got.sha256) {
      const actual = sha256(got.body);
      if (actual !== got.sha256) throw new ArtifactIntegrityError(this.uriOf(objectKey), got.sha256, actual);
    }
    return got.body;
  }

  async list(prefix: string): Promise<string[]> {
    return (await this.listSized(prefix)).map((o) => o.key);
  }

  /** Every key below a prefix with its size in bytes, sorted (retention plans and `ratchet gc`). */
  async listSized(prefix: string): Promise<StoredKey[]> {
    const clean = prefix.replace(/\/+$/, '');
    const base = clean ? `${this.objectKey(clean)}/` : (this.prefix ? `${this.prefix}/` : '');
    const strip = this.prefix ? this.prefix.length + 1 : 0;
    const out: StoredKey[] = [];
    let token: string | undefined;
    do {
      const page = await this.send(() => this.client.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: base, ContinuationToken: token })), base);
      for (const o of page.Contents ?? []) if (o.Key) out.push({ key: o.Key.slice(strip), bytes: o.Size ?? 0 });
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
    return out.sort((a, b) => (a.key < b.key ? -1 : a.key > b.key ? 1 : 0));
  }

  /** Deletes these keys, 1000 to a request (absent ones are no error); a key S3 refuses to delete is an error. */
  async remove(keys: string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += 1000) {
      const objects = keys.slice(i, i + 1000).map((k) => ({ Key: this.objectKey(k) }));
      const res = await this.send(() => this.client.send(new DeleteObjectsCommand({ Bucket: this.bucket, Delete: { Objects: objects, Quiet: true } })), objects[0]!.Key);
      if (res.Errors?.length) {
        throw new Error(`S3 refused to delete ${res.Errors.length} of ${objects.length} keys under ${this.uriOf(objects[0]!.Key)}: ` +
          `${res.Errors.slice(0, 3).map((e) => `${e.Key}: ${e.Code} ${e.Message}`).join('; ')}. Fix: give these credentials s3:DeleteObject on the bucket`);
      }
    }
  }

  async putDir(key: string, dir: string): Promise<ArtifactRef> {
    const { text, bytes, files } = await manifestFor(dir);
    // Files first, the manifest last: a reader trusts only a directory whose manifest is there.
    await mapLimit(files, 4, async (rel) => { await this.put(`${key}/${rel}`, await fs.readFile(path.join(dir, rel))); });
    const man = await this.put(`${key}/${MANIFEST}`, text);
    return { uri: this.uriOf(this.objectKey(key)), sha256: man.sha256, bytes };
  }

  /**
   * Downloads a directory artifact into the local cache (once; a cached copy is re-verified) and returns its
   * path. Each use marks the entry used; each download then bounds the cache (./cache.ts: an LRU by bytes,
   * $RATCHET_CACHE_MAX_GIB), the entry returned kept.
   */
  async localDir(ref: ArtifactRef): Promise<string> {
    const objectKey = this.keyOfUri(ref.uri);
    const dest = path.join(this.cacheRoot, this.bucket, objectKey, ref.sha256.slice(0, 16));
    try {
      const hit = await verifyLocalDir(dest, ref);
      await touchEntry(hit);
      return hit;
    } catch { /* not cached yet, or damaged: fetch it */ }
    const man = await this.getObject(`${objectKey}/${MANIFEST}`);
    if (!man) throw new ArtifactIntegrityError(ref.uri, ref.sha256, `no ${MANIFEST}`);
    const manSha = sha256(man.body);
    if (manSha !== ref.sha256) throw new ArtifactIntegrityError(ref.uri, ref.sha256, manSha);
    const tmp = `${dest}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await mapLimit(manifestEntries(man.body.toString('utf8')), 4, async ({ rel, sha }) => {
        const actual = await this.download(`${objectKey}/${rel}`, path.join(tmp, rel));
        if (actual !== sha) throw new ArtifactIntegrityError(`${ref.uri}/${rel}`, sha, actual);
      });
      await atomicWrite(path.join(tmp, MANIFEST), man.body);
    } catch (err) {
      // A half download (a full disk, the store gone mid-way) must not keep holding the cache's space.
      await fs.rm(tmp, { recursive: true, force: true }).catch(() => undefined);
      throw err;
    }
    await fs.rm(dest, { recursive: true, force: true });
    await fs.rename(tmp, dest).catch(async (err: unknown) => {
      // A concurrent download of the same version won: use it.
      await fs.rm(tmp, { recursive: true, force: true });
      if (!(await verifyLocalDir(dest, ref).then(() => true, () => false))) throw err;
    });
    await touchEntry(dest);
    await pruneCache(this.cacheRoot, cacheLimitBytes(), { keep: [dest] });
    return dest;
  }

  /** Checks the bucket answers with these credentials: the preflight before a run starts (checkStore makes a refusal a config error). */
  async check(): Promise<void> {
    await this.send(() => this.client.send(new HeadBucketCommand({ Bucket: this.bucket })), '');
  }

  /**
   * One object of a directory artifact into `file` (its tmp directory; the caller checks the sha256 returned,
   * 'missing' when there is no such object). An object of STREAM_OBJECT_BYTES or more is streamed to disk and
   * hashed on the way (a full model's weights pass what one Buffer holds); smaller ones are read whole.
   */
  private async download(objectKey: string, file: string): Promise<string> {
    let res;
    try {
      res = await this.send(() => this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey })), objectKey);
    } catch (err) {
      if (isNotFound(err)) return 'missing';
      throw err;
    }
    if (!((res.ContentLength ?? 0) >= STREAM_OBJECT_BYTES && res.Body instanceof Readable)) {
      const body = Buffer.from(await res.Body!.transformToByteArray());
      await atomicWrite(file, body);
      return sha256(body);
    }
    const hash = createHash('sha256');
    await fs.mkdir(path.dirname(file), { recursive: true });
    await pipeline(res.Body, new Transform({ transform(chunk: Buffer, _enc, done) { hash.update(chunk); done(null, chunk); } }), createWriteStream(file));
    return hash.digest('hex');
  }

  private async getObject(objectKey: string): Promise<{ body: Buffer; sha256?: string } | undefined> {
    try {
      const res = await this.send(() => this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey })), objectKey);
      const body = Buffer.from(await res.Body!.transformToByteArray());
      return { body, sha256: res.Metadata?.[SHA_META] };
    } catch (err) {
      if (isNotFound(err)) return undefined;
      throw err;
    }
  }

  /** Runs one SDK call and turns its failures into the store's typed errors. */
  private async send<T>(call: () => Promise<T>, objectKey: string): Promise<T> {
    try {
      return await call();
    } catch (err) {
      throw this.classify(err, objectKey);
    }
  }

  private classify(err: unknown, objectKey: string): unknown {
    const e = err as Error & { name?: string; code?: string; $metadata?: { httpStatusCode?: number } };
    const status = e.$metadata?.httpStatusCode;
    const noBody = bodiless(e.name, status);
    const name = noBody ? `HTTP ${status}` : e.name ?? '';
    const message = noBody ? 'no error body (the answer to a HEAD request has none)' : e.message;
    const where = this.settings.endpoint ? ` at ${this.settings.endpoint}` : '';
    // The store answered but refused: at the start (checkStore) a config error, mid-run a wait naming the store's error.
    if (name === 'NoSuchBucket' || (status === 404 && objectKey === '')) {
      return new StoreRefusedError(this.url + where, name || 'HTTP 404: no such bucket',
        `[artifacts] url: bucket "${this.bucket}" does not exist${where}. Fix: create it (e.g. \`aws s3 mb s3://${this.bucket}\`), or correct the bucket in [artifacts] url`,
        `the bucket "${this.bucket}" is gone: restore it, or recreate it and put back the run's objects (runs/<run>/) from a backup`);
    }
    if (name === 'CredentialsProviderError' || /Could not load credentials/i.test(message)) {
      return new StoreRefusedError(this.url + where, `${name || 'CredentialsProviderError'}: ${message}`,
        `[artifacts] url ${this.url}: no AWS credentials on this host. Fix: export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) for the worker; they never go in the run config`,
        'give this host credentials again (AWS_PROFILE\'s file, the instance role or the token file the SDK reads)');
    }
    if (name === 'RequestTimeTooSkewed') {
      return new StoreRefusedError(this.url + where, `${name}: ${message}`,
        `[artifacts] url ${this.url}: the store refused this host's clock (${name})${where}. Fix: sync the clock (chrony or systemd-timesyncd)`,
        'sync this host\'s clock (chronyc makestep, or systemd-timesyncd)');
    }
    if (REFUSED.includes(name) || status === 403) {
      return new StoreRefusedError(this.url + where, `${name || `HTTP ${status}`}: ${message}`,
        `[artifacts] url ${this.url}: the store refused this host's credentials (${name || `HTTP ${status}`})${where}. ` +
          'Fix: check AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or AWS_PROFILE) and that they may read and write the bucket',
        'give this host valid keys again (rotated or expired keys or token: update them where the SDK reads them; a worker that reads them from its environment needs a restart) and check they may read and write the bucket');
    }
    if (isNotFound(err)) return err;
    if (name === 'PermanentRedirect' || name === 'AuthorizationHeaderMalformed') {
      return new StoreConfigError(`[artifacts] region: bucket "${this.bucket}" is in another region (${message}). Fix: set [artifacts] region to the bucket's region`);
    }
    if (err instanceof S3ServiceException && status !== undefined && status < 500) return err;
    // Connection refused, DNS, timeouts, 5xx: the store is (for now) not there.
    return new StoreUnavailableError(this.url + where, `${name || 'error'}: ${message}`);
  }
}

/**
 * A HEAD request's error answer has no body, so the SDK names it `Unknown` with the message `UnknownError`:
 * the HTTP status is all the store said, and what an operator needs to read.
 */
function bodiless(name: string | undefined, status: number | undefined): status is number {
  return status !== undefined && (name === undefined || name === '' || name === 'Unknown' || name === 'UnknownError');
}

/** Errors of a store that answered but refused these credentials or this request's signature, token or clock. */
const REFUSED = ['InvalidAccessKeyId', 'SignatureDoesNotMatch', 'AccessDenied', 'Forbidden', 'ExpiredToken', 'ExpiredTokenException',
  'InvalidToken', 'TokenRefreshRequired', 'InvalidClientTokenId'];

function isNotFound(err: unknown): boolean {
  const e = err as { name?: string; $metadata?: { httpStatusCode?: number } };
  return e.name === 'NoSuchKey' || e.name === 'NotFound' || (e.$metadata?.httpStatusCode === 404 && e.name !== 'NoSuchBucket');
}

/**
 * fn over items, `limit` at a time. After a failure no new item starts, and the first error is thrown once
 * the items in flight have settled: a caller that then removes what they wrote (localDir's tmp) is not
 * raced by a late write.
 */
async function mapLimit<T>(items: T[], limit: number, fn: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  let failure: { err: unknown } | undefined;
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (!failure && next < items.length) {
      try {
        await fn(items[next++]!);
      } catch (err) {
        failure ??= { err };
      }
    }
  }));
  if (failure) throw failure.err;
}
