/**
 * The workflow bundle the workflow suites' workers run, built once and shared: bundling src/workflows
 * takes seconds of CPU, and every jest worker would otherwise bundle it again for every suite. The
 * bundle is kept under .ratchet/cache/workflow-bundles, keyed by a hash of everything a bundle is made
 * from (the TypeScript under src/ and test/fixtures/, the lockfile, tsconfig.json): a changed source
 * file gives a new key, so a stale bundle is never served. Concurrent jest workers take a lock file,
 * so one bundles while the others wait for its result.
 */
import { createHash } from 'node:crypto';
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import { bundleWorkflowCode, type WorkflowBundle } from '@temporalio/worker';
import { REPO, STATE } from './stack';

const CACHE = path.join(STATE, 'cache', 'workflow-bundles');
/** A lock older than this was left by a killed jest worker: bundling takes well under a minute. */
const STALE_LOCK_MS = 180_000;
/** Cached bundles unused this long are removed when a new one is written. */
const PRUNE_AFTER_MS = 3 * 24 * 3600_000;

/** The bundler's logger: warnings and errors only. */
export const quietLogger = {
  log: () => undefined, trace: () => undefined, debug: () => undefined, info: () => undefined,
  warn: (m: string) => console.warn(m), error: (m: string) => console.error(m),
};

function tsFiles(dir: string, out: string[]): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) tsFiles(p, out);
    else if (/\.(ts|js|json)$/.test(e.name)) out.push(p);
  }
  return out;
}

/** The cache key of a bundle of `workflowsPath`: the path and the content of every file a bundle can include. */
function bundleKey(workflowsPath: string): string {
  const h = createHash('sha256').update(path.relative(REPO, workflowsPath));
  const files = [...tsFiles(path.join(REPO, 'src'), []), ...tsFiles(path.join(REPO, 'test', 'fixtures'), [])].sort();
  for (const f of [...files, path.join(REPO, 'package-lock.json'), path.join(REPO, 'tsconfig.json')]) {
    h.update(path.relative(REPO, f)).update('\0');
    if (existsSync(f)) h.update(readFileSync(f));
  }
  return h.digest('hex').slice(0, 24);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Takes the lock file (O_EXCL); false while another process holds a fresh one. */
function tryLock(lock: string): boolean {
  try {
    closeSync(openSync(lock, 'wx'));
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    try {
      if (Date.now() - statSync(lock).mtimeMs > STALE_LOCK_MS) rmSync(lock, { force: true });
    } catch { /* removed meanwhile by its holder */ }
    return false;
  }
}

function prune(keep: string): void {
  for (const f of readdirSync(CACHE)) {
    const p = path.join(CACHE, f);
    if (p !== keep && f.endsWith('.js') && Date.now() - statSync(p).mtimeMs > PRUNE_AFTER_MS) rmSync(p, { force: true });
  }
}

/** The bundle of `workflowsPath` (default src/workflows), from the cache when its sources are unchanged. */
export async function workflowBundle(workflowsPath = require.resolve('../../src/workflows')): Promise<WorkflowBundle> {
  mkdirSync(CACHE, { recursive: true });
  const file = path.join(CACHE, `${bundleKey(workflowsPath)}.js`);
  const lock = `${file}.lock`;
  for (;;) {
    if (existsSync(file)) return { code: readFileSync(file, 'utf8') };
    if (tryLock(lock)) break;
    await sleep(250);
  }
  try {
    if (existsSync(file)) return { code: readFileSync(file, 'utf8') };
    const { code } = await bundleWorkflowCode({ workflowsPath, logger: quietLogger });
    const tmp = `${file}.${process.pid}.tmp`;
    writeFileSync(tmp, code);
    renameSync(tmp, file);
    prune(file);
    return { code };
  } finally {
    rmSync(lock, { force: true });
  }
}
