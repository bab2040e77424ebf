import { execFile } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { TaskSetupError } from '../tasks/setupError';

export interface RepoSpec {
  /** A git snapshot on this host: a bare repo (`repos/<name>-<version>.git`) or a work tree with `.git/`. */
  hostPath: string;
  baseCommit: string;
}

const execFileAsync = promisify(execFile);
const CACHE_ENTRIES = 32;
/** Rollouts of one group share a task: keep the last few git dirs ready to stream. */
const cache = new Map<string, Promise<Buffer>>();

/**
 * A tar of a git directory that holds the base commit and nothing else:
 * depth 1, no refs, no other task's commit. A task snapshot also carries the
 * clean upstream code (`refs/heads/main`) and every other task's commit, so
 * handing the agent the whole snapshot would hand it the fix.
 */
export function baseCommitTar(repo: RepoSpec): Promise<Buffer> {
  validate(repo);
  const key = `${path.resolve(repo.hostPath)}\0${repo.baseCommit}`;
  let hit = cache.get(key);
  if (hit) {
    cache.delete(key); // re-insert: most recently used last
  } else {
    hit = build(repo);
    hit.catch(() => cache.delete(key));
  }
  cache.set(key, hit);
  while (cache.size > CACHE_ENTRIES) cache.delete(cache.keys().next().value!);
  return hit;
}

function validate(repo: RepoSpec): void {
  // Full ids only: a commit is fetched by id, and git cannot fetch an abbreviation.
  if (!/^([0-9a-f]{40}|[0-9a-f]{64})$/.test(repo.baseCommit)) {
    throw new TaskSetupError(`repo.baseCommit must be a full 40- or 64-hex commit id, got ${JSON.stringify(repo.baseCommit)}; fix the task row's base_commit`);
  }
  const nested = path.join(repo.hostPath, '.git');
  const gitDir = fs.existsSync(path.join(nested, 'HEAD')) ? nested : repo.hostPath;
  if (!fs.existsSync(path.join(gitDir, 'HEAD')) || !fs.existsSync(path.join(gitDir, 'objects'))) {
    throw new TaskSetupError(
      `repo.hostPath ${repo.hostPath} is not a git repository (no HEAD and objects/); ` +
        'point it at a snapshot such as .ratchet/tasks/repos/<name>-<version>.git, or regenerate the task set',
    );
  }
}

async function build(repo: RepoSpec): Promise<Buffer> {
  const dir = await fs.promises.mkdtemp(path.join(os.tmpdir(), 'ratchet-base-'));
  try {
    const git = (...args: string[]) => execFileAsync('git', ['-C', dir, ...args], { maxBuffer: 16 * 1024 * 1024 });
    // --template= : no sample hooks; the agent gets a bare minimum git dir.
    await git('init', '-q', '--bare', '--template=');
    try {
      // safe.directory: the snapshot may belong to another user (e.g. made by root).
      await git('-c', 'safe.directory=*', 'fetch', '-q', '--no-tags', '--depth', '1', `file://${path.resolve(repo.hostPath)}`, repo.baseCommit);
    } catch (err) {
      const stderr = String((err as { stderr?: string }).stderr ?? err).trim();
      throw new TaskSetupError(`base commit ${repo.baseCommit} is not in the snapshot ${repo.hostPath} (git fetch: ${stderr}); fix the task row's base_commit or regenerate the task set`);
    }
    // FETCH_HEAD names the host path; the container does not need it.
    await fs.promises.rm(path.join(dir, 'FETCH_HEAD'), { force: true });
    const { stdout } = await execFileAsync('tar', ['-C', dir, '-cf', '-', '.'], { encoding: 'buffer', maxBuffer: 2 ** 31 - 1 });
    return stdout;
  } finally {
    await fs.promises.rm(dir, { recursive: true, force: true });
  }
}

/** For benchmarks: forget cached git dirs so the next acquire pays for building one. */
export function clearSnapshotCache(): void {
  cache.clear();
}
