/**
 * A task file's sha256 and size, for a step's lineage (docs/operations.md#lineage). Every step samples
 * from the same files, so each is hashed once per (path, size, mtime): a file rewritten in place gets
 * hashed again, an unchanged one costs a stat.
 */
import { createHash } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';

const cache = new Map<string, { key: string; sha256: string; bytes: number }>();

/** sha256 and size of a regular file; undefined for anything else (a Harbor task directory). */
export async function fileDigest(file: string): Promise<{ sha256: string; bytes: number } | undefined> {
  const st = await fs.stat(file);
  if (!st.isFile()) return undefined;
  const key = `${st.size}:${st.mtimeMs}:${st.ino}`;
  const hit = cache.get(file);
  if (hit?.key === key) return { sha256: hit.sha256, bytes: hit.bytes };
  const h = createHash('sha256');
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  const out = { sha256: h.digest('hex'), bytes: st.size };
  cache.set(file, { key, ...out });
  return out;
}
