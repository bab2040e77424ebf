import { createHash, randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { paths } from '../shared/paths';
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

/**
 * The artifact store: content addressed by a caller-chosen key, written atomically
 * (temp name + rename) so a retried activity never sees half a file. Local
 * directory backend; the interface is what an S3-compatible backend implements too.
 */
export interface ArtifactStore {
  put(key: string, data: Buffer | string): Promise<ArtifactRef>;
  putJson(key: string, value: unknown): Promise<ArtifactRef>;
  get(ref: ArtifactRef): Promise<Buffer>;
  getJson<T = unknown>(ref: ArtifactRef): Promise<T>;
  exists(key: string): Promise<ArtifactRef | undefined>;
  /** Absolute local path for a key (for processes that read files directly, e.g. the trainer). */
  localPath(key: string): string;
}

export class LocalArtifactStore implements ArtifactStore {
  constructor(readonly root: string = paths.artifacts()) {}

  localPath(key: string): string {
    const normalized = path.normalize(key);
    if (normalized.startsWith('..') || path.isAbsolute(normalized)) {
      throw new Error(`artifact key "${key}" escapes the store root; use a relative key like "runs/<run>/..."`);
    }
    return path.join(this.root, normalized);
  }

  async put(key: string, data: Buffer | string): Promise<ArtifactRef> {
    const file = this.localPath(key);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
    const buf = typeof data === 'string' ? Buffer.from(data) : data;
    await fs.writeFile(tmp, buf);
    await fs.rename(tmp, file);
    return { uri: pathToFileURL(file).href, sha256: sha256(buf), bytes: buf.length };
  }

  putJson(key: string, value: unknown): Promise<ArtifactRef> {
    return this.put(key, JSON.stringify(value));
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
    try {
      const buf = await fs.readFile(file);
      return { uri: pathToFileURL(file).href, sha256: sha256(buf), bytes: buf.length };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
      throw err;
    }
  }
}

export function uriToPath(uri: string): string {
  if (!uri.startsWith('file://')) {
    throw new Error(`artifact uri "${uri}" is not a file:// uri; only the local store is configured (set [artifacts] in the run config for S3)`);
  }
  return fileURLToPath(uri);
}

/** Verifies any artifact ref against the bytes on disk: the fault tests' sha256 invariant. */
export async function verifyRef(ref: ArtifactRef): Promise<void> {
  const actual = sha256(await fs.readFile(uriToPath(ref.uri)));
  if (actual !== ref.sha256) throw new ArtifactIntegrityError(ref.uri, ref.sha256, actual);
}
