import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { paths } from '../shared/paths';
import { diskFullFrom } from './errors';
import type { ArtifactRef } from './ref';

export class ArtifactIntegrityError extends Error {
  constructor(public readonly uri: string, public readonly expected: string, public readonly actual: string) {
    super(`artifact ${uri} is corrupt: recorded sha256 ${expected}, found ${actual}. ` +
      'Fix: restore the file from a backup, or re-run the step that produced it (the run resumes from its last completed step).');
    this.name = 'ArtifactIntegrityError';
  }
}

export function sha256(data: Buffer | string): string {
  return createHash('sha256').update(data).digest('hex');
}

/** A directory artifact (checkpoint, adapter) lists `sha256  relative/path` per file here; its ref's sha256 is this file's. */
export const MANIFEST = 'MANIFEST.sha256';

/**
 * The artifact store: objects under caller-chosen keys (`runs/<run>/...`), written
 * atomically so a retried activity never sees half an object, each carrying its
 * sha256, which every read checks. Two backends: a local directory (file://) and
 * any S3-compatible store (s3://, src/artifacts/s3.ts).
 */
export interface ArtifactStore {
  /** Where the store lives, for messages and logs: file:///dir or s3://bucket/prefix. */
  readonly url: string;
  put(key: string, data: Buffer | string): Promise<ArtifactRef>;
  putJson(key: string, value: unknown): Promise<ArtifactRef>;
  /**
   * Creates the object only where none is (a local hard link that fails on EEXIST; S3's conditional
   * put, If-None-Match: *). `created` false: an object was already there, left as it was; its ref
   * is returned (the same bytes for a content-keyed key: this write, retried). Append-only records use it.
   */
  putIfAbsent(key: string, data: Buffer | string): Promise<{ ref: ArtifactRef; created: boolean }>;
  get(ref: ArtifactRef): Promise<Buffer>;
  getJson<T = unknown>(ref: ArtifactRef): Promise<T>;
  exists(key: string): Promise<ArtifactRef | undefined>;
  /** The bytes under a key, or undefined; the S3 backend checks them against the sha256 stored with them. */
  read(key: string): Promise<Buffer | undefined>;
  /** Every key below a prefix ("runs/r1/evals/"), sorted. */
  list(prefix: string): Promise<string[]>;
  /** Uploads a local directory as a directory artifact: every file, MANIFEST.sha256 last (the commit point). */
  putDir(key: string, dir: string): Promise<ArtifactRef>;
  /** A verified local copy of a directory artifact (the directory itself for a local store; a cache for S3). */
  localDir(ref: ArtifactRef): Promise<string>;
}

export function checkKey(key: string): string {
  const normalized = path.posix.normalize(key);
  if (normalized.startsWith('..') || path.posix.isAbsolute(normalized) || normalized === '.') {
    throw new Error(`artifact key "${key}" escapes the store root; use a relative key like "runs/<run>/..."`);
  }
  return normalized;
}

/** Parses MANIFEST.sha256 text into (relative path, sha256) pairs. */
export function manifestEntries(text: string): { rel: string; sha: string }[] {
  const out: { rel: string; sha: string }[] = [];
  for (const line of text.split('\n')) {
    const m = /^([0-9a-f]{64}) {2}(.+)$/.exec(line.trim());
    if (m) out.push({ sha: m[1]!, rel: m[2]! });
  }
  return out;
}

/** Builds MANIFEST.sha256 text for every file below dir (except an existing manifest). */
export async function manifestFor(dir: string): Promise<{ text: string; bytes: number; files: string[] }> {
  const files = (await listFiles(dir)).filter((f) => f !== MANIFEST).sort();
  let text = '';
  let bytes = 0;
  for (const rel of files) {
    const buf = await fs.readFile(path.join(dir, rel));
    text += `${sha256(buf)}  ${rel}\n`;
    bytes += buf.length;
  }
  return { text, bytes, files };
}

async function listFiles(dir: string, prefix = ''): Promise<string[]> {
  let entries: import('node:fs').Dirent[];
  try {
    entries = await fs.readdir(path.join(dir, prefix), { withFileTypes: true });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw err;
  }
  const out: string[] = [];
  for (const e of entries) {
    const rel = prefix ? `${prefix}/${e.name}` : e.name;
    if (e.isDirectory()) out.push(...await listFiles(dir, rel));
    else if (e.isFile() && !/\.tmp-/.test(e.name)) out.push(rel);
  }
  return out;
}

/** Errnos that prove a file is not there; any other read error (EMFILE, EIO, ENOMEM) proves nothing about it. */
const ABSENT_CODES = new Set(['ENOENT', 'ENOTDIR', 'EISDIR']);

/** A file's bytes, or undefined when it is provably not there; other read errors are thrown. */
async function readIfThere(file: string): Promise<Buffer | undefined> {
  try {
    return await fs.readFile(file);
  } catch (err) {
    if (ABSENT_CODES.has((err as NodeJS.ErrnoException).code ?? '')) return undefined;
    throw err;
  }
}

/** A file's sha256, read as a stream (a full model's weights pass fs.readFile's 2 GiB limit), or undefined when it is provably not there. */
async function sha256OfFileIfThere(file: string): Promise<string | undefined> {
  const hash = createHash('sha256');
  try {
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
  } catch (err) {
    if (ABSENT_CODES.has((err as NodeJS.ErrnoException).code ?? '')) return undefined;
    throw err;
  }
  return hash.digest('hex');
}

/**
 * Checks a local directory against its manifest and the ref's sha256; returns the directory. An
 * ArtifactIntegrityError only for bytes that do not match or files that are not there.
 */
export async function verifyLocalDir(dir: string, ref: ArtifactRef): Promise<string> {
  const manifest = await readIfThere(path.join(dir, MANIFEST));
  if (!manifest) throw new ArtifactIntegrityError(ref.uri, ref.sha256, `no ${MANIFEST}`);
  const actual = sha256(manifest);
  if (actual !== ref.sha256) throw new ArtifactIntegrityError(ref.uri, ref.sha256, actual);
  for (const { rel, sha } of manifestEntries(manifest.toString('utf8'))) {
    const got = await sha256OfFileIfThere(path.join(dir, rel)) ?? 'missing';
    if (got !== sha) throw new ArtifactIntegrityError(`${ref.uri}/${rel}`, sha, got);
  }
  return dir;
}

export async function atomicWrite(file: string, buf: Buffer): Promise<void> {
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  try {
    await fs.mkdir(path.dirname(file), { recursive: true });
    await fs.writeFile(tmp, buf);
    await fs.rename(tmp, file);
  } catch (err) {
    // A half-written temp file on a full disk holds the space an operator is freeing.
    await fs.rm(tmp, { force: true }).catch(() => undefined);
    throw diskFullFrom(err, file) ?? err;
  }
}

/** A key and its size, as a store lists it. */
export interface StoredKey { key: string; bytes: number }

/** A store that can list sizes and delete (both built-in stores): retention and `ratchet gc` (src/records/retention.ts). */
export interface PrunableStore extends ArtifactStore {
  listSized(prefix: string): Promise<StoredKey[]>;
  remove(keys: string[]): Promise<void>;
}

export const isPrunable = (store: ArtifactStore): store is PrunableStore =>
  typeof (store as Partial<PrunableStore>).listSized === 'function' && typeof (store as Partial<PrunableStore>).remove === 'function';

export class LocalArtifactStore implements ArtifactStore {
  readonly url: string;

  constructor(readonly root: string = paths.artifacts()) {
    this.url = pathToFileURL(path.resolve(root)).href;
  }

  localPath(key: string): string {
    return path.join(this.root, checkKey(key));
  }

  async put(key: string, data: Buffer | string): Promise<ArtifactRef> {
    const file = this.localPath(key);
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    await atomicWrite(file, buf);
    return { uri: pathToFileURL(file).href, sha256: sha256(buf), bytes: buf.length };
  }

  putJson(key: string, value: unknown): Promise<ArtifactRef> {
    return this.put(key, JSON.stringify(value));
  }

  async putIfAbsent(key: string, data: Buffer | string): Promise<{ ref: ArtifactRef; created: boolean }> {
    const file = this.localPath(key);
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    try {
      await fs.mkdir(path.dirname(file), { recursive: true });
      await fs.writeFile(tmp, buf);
      // link(2) never replaces: of two writers of one key exactly one creates it, and a reader sees a whole file.
      await fs.link(tmp, file);
      return { ref: { uri: pathToFileURL(file).href, sha256: sha256(buf), bytes: buf.length }, created: true };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw diskFullFrom(err, file) ?? err;
      const there = await fs.readFile(file);
      return { ref: { uri: pathToFileURL(file).href, sha256: sha256(there), bytes: there.length }, created: false };
    } finally {
      await fs.rm(tmp, { force: true }).catch(() => undefined);
    }
  }

  async get(ref: ArtifactRef): Promise<Buffer> {
    const buf = await fs.readFile(uriToPath(ref.uri));
    const actual = sha256(buf);
    if (actual !== ref.sha256) throw new ArtifactIntegrityError(ref.uri, ref.sha256, actual);
    return buf;
  }

  async getJson<T = unknown>(ref: ArtifactRef): Promise<T> {
    return JSON.parse((await this.get(ref)).toString('utf8')) as T;
  }

  async exists(key: string): Promise<ArtifactRef | undefined> {
    const file = this.localPath(key);
    const buf = await this.read(key);
    return buf && { uri: pathToFileURL(file).href, sha256: sha256(buf), bytes: buf.length };
  }

  async read(key: string): Promise<Buffer | undefined> {
    try {
      return await fs.readFile(this.localPath(key));
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'ENOENT' || code === 'EISDIR') return undefined;
      throw err;
    }
  }

  async list(prefix: string): Promise<string[]> {
    const clean = prefix.replace(/\/+$/, '');
    const base = clean ? checkKey(clean) : '';
    return (await listFiles(this.root, base)).sort();
  }

  /** Every key below a prefix with its size in bytes, sorted (retention plans and `ratchet gc`). */
  async listSized(prefix: string): Promise<StoredKey[]> {
    return Promise.all((await this.list(prefix)).map(async (key) => ({ key, bytes: (await fs.stat(this.localPath(key))).size })));
  }

  /** Deletes these keys (absent ones are no error), then the directories they leave empty, up to the store root. */
  async remove(keys: string[]): Promise<void> {
    const dirs = new Set<string>();
    for (const key of keys) {
      await fs.rm(this.localPath(key), { force: true });
      for (let d = path.posix.dirname(checkKey(key)); d !== '.' && d !== '/'; d = path.posix.dirname(d)) dirs.add(d);
    }
    for (const d of [...dirs].sort((a, b) => b.length - a.length)) {
      await fs.rmdir(this.localPath(d)).catch(() => undefined); // not empty (or gone): kept
    }
  }

  async putDir(key: string, dir: string): Promise<ArtifactRef> {
    const final = this.localPath(key);
    const { text, bytes, files } = await manifestFor(dir);
    if (path.resolve(dir) !== path.resolve(final)) {
      const tmp = `${final}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
      try {
        for (const rel of files) {
          await fs.mkdir(path.dirname(path.join(tmp, rel)), { recursive: true });
          await fs.copyFile(path.join(dir, rel), path.join(tmp, rel));
        }
        await fs.writeFile(path.join(tmp, MANIFEST), text);
      } catch (err) {
        await fs.rm(tmp, { recursive: true, force: true }).catch(() => undefined);
        throw diskFullFrom(err, final) ?? err;
      }
      await fs.rm(final, { recursive: true, force: true });
      await fs.mkdir(path.dirname(final), { recursive: true });
      await fs.rename(tmp, final);
    } else {
      await atomicWrite(path.join(final, MANIFEST), Buffer.from(text));
    }
    return { uri: pathToFileURL(final).href, sha256: sha256(text), bytes };
  }

  localDir(ref: ArtifactRef): Promise<string> {
    return verifyLocalDir(uriToPath(ref.uri), ref);
  }
}

export function uriToPath(uri: string): string {
  if (!uri.startsWith('file://')) {
    throw new Error(`artifact uri "${uri}" is not a file:// uri, so it has no local path. ` +
      'Fix: read it through its store (storeForRef / the run\'s [artifacts] settings), which fetches s3:// objects');
  }
  return fileURLToPath(uri);
}

/** Verifies a local (file://) artifact ref against the bytes on disk: the fault tests' sha256 invariant. */
export async function verifyRef(ref: ArtifactRef): Promise<void> {
  const actual = sha256(await fs.readFile(uriToPath(ref.uri)));
  if (actual !== ref.sha256) throw new ArtifactIntegrityError(ref.uri, ref.sha256, actual);
}
