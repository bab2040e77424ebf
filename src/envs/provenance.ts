/**
 * Which environment code a rollout ran, for the step's lineage (docs/operations.md#lineage):
 * its version and a sha256 over its sources, computed once per environment and process.
 * - A module (`[[env]].module`): the version it exports (`version`), else its package.json's;
 *   the sources are its package's (the nearest package.json above it, other than Ratchet's own),
 *   else the folder of its file, else (a file at the repository root) the file alone.
 * - A built-in: Ratchet's package version and the sources of its folder under src/envs/.
 * The sha256 covers each source's relative path and bytes in path order (as the trainer's
 * code_version.py does), so the same sources give the same sha256 wherever they are installed.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { REPO_ROOT } from '../shared/paths';
import type { Environment } from './types';

export interface EnvProvenance {
  id: string;
  version: string;
  sha256: string;
}

const SOURCE = /\.(?:[cm]?js|[cm]?ts|json)$/;
const SKIP = new Set(['node_modules', '.git']);

/** The built-ins' folders under src/envs (dist/envs once compiled). */
const BUILTIN_DIRS: Record<string, string> = {
  'swe-grep': 'swe-grep', 'code-repair': 'code-repair', debug: 'debug', harbor: 'harbor', nano: 'harnesses', 'mini-swe-agent': 'harnesses',
};

/** Every source file under root (relative paths, sorted), skipping node_modules and .git. */
export function sourceFiles(root: string): string[] {
  const out: string[] = [];
  const walk = (dir: string) => {
    for (const ent of readdirSync(dir, { withFileTypes: true })) {
      if (SKIP.has(ent.name)) continue;
      const abs = path.join(dir, ent.name);
      if (ent.isDirectory()) walk(abs);
      else if (ent.isFile() && SOURCE.test(ent.name)) out.push(path.relative(root, abs).split(path.sep).join('/'));
    }
  };
  walk(root);
  return out.sort();
}

/** sha256 over (length-prefixed) relative path and bytes of each file, in the order given. */
export function sourcesSha256(root: string, files: string[]): string {
  const h = createHash('sha256');
  const len = (n: number) => { const b = Buffer.alloc(8); b.writeBigUInt64BE(BigInt(n)); return b; };
  for (const rel of files) {
    const name = Buffer.from(rel);
    const data = readFileSync(path.join(root, rel));
    h.update(len(name.length)).update(name).update(len(data.length)).update(data);
  }
  return h.digest('hex');
}

function packageJsonAbove(file: string): { dir: string; version?: string } | undefined {
  for (let dir = path.dirname(file); ; dir = path.dirname(dir)) {
    const pj = path.join(dir, 'package.json');
    if (existsSync(pj)) {
      let version: string | undefined;
      try {
        const v = (JSON.parse(readFileSync(pj, 'utf8')) as { version?: unknown }).version;
        if (typeof v === 'string') version = v;
      } catch { /* an unreadable package.json names no version */ }
      return { dir, version };
    }
    if (path.dirname(dir) === dir) return undefined;
  }
}

/** Computes it (no cache): see the module comment for what is hashed. */
export function computeEnvProvenance(env: Pick<Environment, 'id' | 'origin' | 'version'>, repoRoot: string = REPO_ROOT, envsDir: string = __dirname): EnvProvenance {
  const origin = env.origin && env.origin !== 'built-in' ? env.origin : undefined;
  if (!origin) {
    const dir = path.join(envsDir, BUILTIN_DIRS[env.id] ?? env.id);
    const ratchet = packageJsonAbove(path.join(repoRoot, 'package.json'));
    return { id: env.id, version: env.version ?? ratchet?.version ?? 'unknown', sha256: sourcesSha256(dir, existsSync(dir) ? sourceFiles(dir) : []) };
  }
  const pkg = packageJsonAbove(origin);
  const ownPackage = pkg && path.resolve(pkg.dir) !== path.resolve(repoRoot) ? pkg : undefined;
  let root = ownPackage?.dir ?? (statSync(origin).isDirectory() ? origin : path.dirname(origin));
  let files: string[];
  if (!ownPackage && path.resolve(root) === path.resolve(repoRoot)) {
    // A module file at the repository root: hashing the folder would hash all of Ratchet.
    root = path.dirname(origin);
    files = [path.basename(origin)];
  } else {
    files = sourceFiles(root);
  }
  return { id: env.id, version: env.version ?? ownPackage?.version ?? 'unknown', sha256: sourcesSha256(root, files) };
}

const cache = new Map<string, EnvProvenance>();

/** computeEnvProvenance, once per environment (id and origin) and process: the code a worker loaded does not change under it. */
export function envProvenance(env: Pick<Environment, 'id' | 'origin' | 'version'>): EnvProvenance {
  const key = `${env.id}\0${env.origin ?? 'built-in'}`;
  let hit = cache.get(key);
  if (!hit) {
    hit = computeEnvProvenance(env);
    cache.set(key, hit);
  }
  return hit;
}
