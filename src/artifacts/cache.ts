/**
 * The S3 download cache (<cache root>/<bucket>/<object key>/<sha256[:16]>/, one entry per directory
 * artifact: S3ArtifactStore.localDir; the trainer keeps its own the same way, trainer core/store.py) is an
 * LRU bounded by bytes: without a bound an inference host fills its disk with every adapter it ever
 * served, a main worker with every checkpoint a fallback verified (issue 42).
 *
 * Never evicted, whatever the bound: the entry a caller is being handed, entries used in the last
 * CACHE_IN_USE_MS (the call that fetched one may still be reading it), and the adapters a vLLM replica
 * serves (SERVED_FILE, written by weight sync): vLLM reads an adapter's directory again whenever its
 * own LoRA cache dropped it.
 */
import { randomBytes } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { componentLogger } from '../shared/logger';
import { StoreConfigError } from './errors';
import { MANIFEST } from './store';

export const CACHE_LIMIT_ENV = 'RATCHET_CACHE_MAX_GIB';
export const DEFAULT_CACHE_GIB = 20;
export const CACHE_IN_USE_MS = 10 * 60_000;
/** Under the cache root: { [replica base url]: [adapter directories it serves] }. */
export const SERVED_FILE = 'served.json';

const ENTRY = /^[0-9a-f]{16}$/;
const log = componentLogger('artifact-cache');

export interface CacheEntry { dir: string; bytes: number; usedMs: number }

/** The cache's bound: $RATCHET_CACHE_MAX_GIB (GiB, may be fractional), else 20 GiB. */
export function cacheLimitBytes(env: NodeJS.ProcessEnv = process.env): number {
  const raw = (env[CACHE_LIMIT_ENV] ?? '').trim();
  if (!raw) return DEFAULT_CACHE_GIB * 2 ** 30;
  const gib = Number(raw);
  if (!Number.isFinite(gib) || gib < 0) {
    throw new StoreConfigError(`${CACHE_LIMIT_ENV}="${raw}" is not a size in GiB >= 0. Fix: e.g. ${CACHE_LIMIT_ENV}=20 (0 keeps only what is in use)`);
  }
  return Math.floor(gib * 2 ** 30);
}

async function bytesUnder(dir: string): Promise<number> {
  let total = 0;
  for (const e of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    total += e.isDirectory() ? await bytesUnder(p) : (await fs.stat(p)).size;
  }
  return total;
}

/** Every committed entry under the cache root, least recently used first (a download in progress is none). */
export async function cacheEntries(root: string): Promise<CacheEntry[]> {
  const out: CacheEntry[] = [];
  async function walk(dir: string): Promise<void> {
    let items;
    try {
      items = await fs.readdir(dir, { withFileTypes: true });
    } catch {
      return; // gone meanwhile (another process evicted it)
    }
    for (const e of items) {
      if (!e.isDirectory() || e.name.includes('.tmp-')) continue;
      const p = path.join(dir, e.name);
      if (ENTRY.test(e.name) && await fs.stat(path.join(p, MANIFEST)).then(() => true, () => false)) {
        const [bytes, st] = await Promise.all([bytesUnder(p), fs.stat(p)]);
        out.push({ dir: p, bytes, usedMs: st.mtimeMs });
      } else {
        await walk(p);
      }
    }
  }
  await walk(root);
  return out.sort((a, b) => a.usedMs - b.usedMs);
}

/** Marks an entry used now (its mtime: the LRU's clock). */
export async function touchEntry(dir: string): Promise<void> {
  const now = new Date();
  await fs.utimes(dir, now, now).catch(() => undefined);
}

/** The adapter directories the replicas serve, as weight sync last recorded them. */
export async function servedDirs(root: string): Promise<Set<string>> {
  try {
    const served = JSON.parse(await fs.readFile(path.join(root, SERVED_FILE), 'utf8')) as Record<string, string[]>;
    return new Set(Object.values(served).flat().map((d) => path.resolve(d)));
  } catch {
    return new Set();
  }
}

/** Weight sync records what one replica serves now (its /v1/models roots under this cache). */
export async function recordServed(root: string, baseUrl: string, dirs: string[]): Promise<void> {
  const file = path.join(root, SERVED_FILE);
  let served: Record<string, string[]> = {};
  try {
    served = JSON.parse(await fs.readFile(file, 'utf8')) as Record<string, string[]>;
  } catch { /* none yet */ }
  const mine = dirs.map((d) => path.resolve(d)).filter((d) => d.startsWith(path.resolve(root) + path.sep)).sort();
  if (JSON.stringify(served[baseUrl] ?? []) === JSON.stringify(mine)) return;
  served[baseUrl] = mine;
  await fs.mkdir(root, { recursive: true });
  const tmp = `${file}.tmp-${process.pid}-${randomBytes(4).toString('hex')}`;
  await fs.writeFile(tmp, JSON.stringify(served, null, 1));
  await fs.rename(tmp, file);
}

/**
 * Evicts least recently used entries until the cache holds at most `limit` bytes, sparing `keep`, the
 * served adapters and entries in use. An entry is renamed away before it is deleted, so a reader finds
 * it whole or not at all (and fetches it again). Returns what went.
 */
export async function pruneCache(root: string, limit: number, opts: { keep?: string[]; nowMs?: number } = {}): Promise<CacheEntry[]> {
  const now = opts.nowMs ?? Date.now();
  const spare = new Set([...(opts.keep ?? []).map((d) => path.resolve(d)), ...await servedDirs(root)]);
  const entries = await cacheEntries(root);
  let total = entries.reduce((a, e) => a + e.bytes, 0);
  const gone: CacheEntry[] = [];
  for (const e of entries) {
    if (total <= limit) break;
    if (spare.has(path.resolve(e.dir)) || now - e.usedMs < CACHE_IN_USE_MS) continue;
    const doomed = `${e.dir}.tmp-evict-${randomBytes(4).toString('hex')}`;
    try {
      await fs.rename(e.dir, doomed);
    } catch {
      continue; // another process evicted or replaced it first
    }
    await fs.rm(doomed, { recursive: true, force: true });
    total -= e.bytes;
    gone.push(e);
    // The object key's folders it leaves empty.
    for (let dir = path.dirname(e.dir); dir.startsWith(path.resolve(root) + path.sep); dir = path.dirname(dir)) {
      if (!(await fs.rmdir(dir).then(() => true, () => false))) break;
    }
  }
  if (gone.length) log.info({ cache: root, evicted: gone.length, bytes: gone.reduce((a, e) => a + e.bytes, 0), heldBytes: total, limitBytes: limit }, 'S3 download cache: evicted least recently used entries');
  return gone;
}
