import * as path from 'node:path';
import type Docker from 'dockerode';
import type { SandboxConfig } from '../config/schema';
import type { Logger } from '../shared/logger';
import { type ExecResult, runExec } from './exec';
import { REPO_DIR, WORK_DIR } from './options';
import { baseCommitTar, type RepoSpec } from './snapshot';
import { stopAndMeasure, type ContainerUsage } from './usage';
import { removeContainer } from './removal';

export type { RepoSpec } from './snapshot';

/** A repository that ships inside the task's image (SWE-bench's /testbed). */
export interface ImageRepoSpec {
  dir: string;
  baseCommit: string;
}

export interface SandboxExecOptions {
  timeoutMs?: number;
  /** Relative paths resolve against the repository (or /work when there is none). */
  cwd?: string;
  stdin?: string;
  signal?: AbortSignal;
}

export interface Sandbox {
  readonly id: string;
  readonly name: string;
  exec(command: string, opts?: SandboxExecOptions): Promise<ExecResult>;
  writeFile(filePath: string, content: string | Buffer): Promise<void>;
  readFile(filePath: string): Promise<string>;
  /** Work tree vs the base commit, new files included: what the agent changed. */
  diff(): Promise<string>;
  /** Removes the container, also in the middle of an exec; safe to call twice. */
  release(): Promise<void>;
  /** After release: what the container cost by Docker's records (undefined before, or when Docker had lost it). */
  usage?(): ContainerUsage | undefined;
}

/** Files and diffs the environment reads whole; anything larger is an error, not a silent cut. */
const FILE_LIMIT_BYTES = 16 * 1024 * 1024;
const SETUP_TIMEOUT_MS = 120_000;

/**
 * A git dir holding only the base commit (snapshot.ts) arrives as a tar on
 * stdin and becomes /work/repo/.git; no host path is mounted, so a warm
 * container made before the task was known can take any task. Extracted by the
 * agent, every file is the agent's: git's safe.directory check has nothing to
 * object to.
 */
const LOAD_REPO = `set -e
mkdir -p ${REPO_DIR}/.git
tar -x -C ${REPO_DIR}/.git -f -
cd ${REPO_DIR}
git config core.bare false
git cat-file -e "$1^{commit}" 2>/dev/null || { echo "base commit $1 is not in the snapshot" >&2; exit 3; }
git checkout -q -f --detach "$1"`;

/**
 * The image's repository, copied (as the agent, so every file is the agent's)
 * into the tmpfs work area: the root stays read-only, and the agent's edits
 * never touch the image's copy.
 */
const COPY_IMAGE_REPO = `set -e
[ -d "$1/.git" ] || { echo "the task image has no git repository at $1 (source.repo_dir)" >&2; exit 3; }
mkdir -p ${REPO_DIR}
cp -R --preserve=mode,timestamps "$1"/. ${REPO_DIR}/
cd ${REPO_DIR}
git cat-file -e "$2^{commit}" 2>/dev/null || { echo "base commit $2 is not in the image's repository at $1" >&2; exit 3; }
git checkout -q -f --detach "$2"`;

/** A throwaway index, so the agent's own staging area is left alone. */
const DIFF = `set -e
cd ${REPO_DIR}
export GIT_INDEX_FILE=$(mktemp /tmp/ratchet-diff-index.XXXXXX)
trap 'rm -f "$GIT_INDEX_FILE"' EXIT
git read-tree "$1"
git add -A -- . ':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.pyc'
git diff --cached --no-color --no-ext-diff --binary --full-index "$1"`;

const WRITE_FILE = 'set -e; mkdir -p -- "$(dirname -- "$1")"; cat > "$1"';

export class DockerSandbox implements Sandbox {
  private baseCommit: string | undefined;
  private releasing: Promise<void> | undefined;
  private measured: ContainerUsage | undefined;
  private readonly running = new Set<AbortController>();
  private readonly releaseHooks: (() => void)[] = [];

  constructor(
    private readonly docker: Docker,
    private readonly container: Docker.Container,
    readonly name: string,
    private readonly limits: SandboxConfig,
    private readonly log: Logger,
    /** Called with the container when its removal failed (dockerd away): the manager removes it later. */
    private readonly onLeftover?: (container: Docker.Container) => void,
  ) {}

  get id(): string {
    return this.container.id;
  }

  private get home(): string {
    return this.baseCommit ? REPO_DIR : WORK_DIR;
  }

  async exec(command: string, opts: SandboxExecOptions = {}): Promise<ExecResult> {
    return this.run(['bash', '-lc', command], {
      ...opts,
      timeoutMs: opts.timeoutMs ?? this.limits.exec_timeout_s * 1000,
      limit: this.limits.output_limit_bytes,
    });
  }

  async writeFile(filePath: string, content: string | Buffer): Promise<void> {
    const target = path.posix.resolve(this.home, filePath);
    await this.script('writeFile', WRITE_FILE, [target], { stdin: content });
  }

  async readFile(filePath: string): Promise<string> {
    const target = path.posix.resolve(this.home, filePath);
    return this.script('readFile', 'cat -- "$1"', [target]);
  }

  async diff(): Promise<string> {
    if (!this.baseCommit) throw new Error(`sandbox ${this.name} has no repository: pass repo to acquire() to use diff()`);
    return this.script('diff', DIFF, [this.baseCommit]);
  }

  async loadRepo(repo: RepoSpec, signal?: AbortSignal): Promise<void> {
    const tar = await baseCommitTar(repo);
    await this.script('loadRepo', LOAD_REPO, [repo.baseCommit], { stdin: tar, signal, timeoutMs: SETUP_TIMEOUT_MS });
    this.baseCommit = repo.baseCommit;
  }

  async copyImageRepo(repo: ImageRepoSpec, signal?: AbortSignal): Promise<void> {
    await this.script('copyImageRepo', COPY_IMAGE_REPO, [repo.dir, repo.baseCommit], { signal, timeoutMs: SETUP_TIMEOUT_MS });
    this.baseCommit = repo.baseCommit;
  }

  release(): Promise<void> {
    if (!this.releasing) {
      for (const hook of this.releaseHooks.splice(0)) hook();
      this.releasing = this.remove();
    }
    return this.releasing;
  }

  usage(): ContainerUsage | undefined {
    return this.measured;
  }

  /** Runs `fn` once, when the sandbox is first released (the manager counts busy sandboxes with it). */
  onRelease(fn: () => void): void {
    this.releaseHooks.push(fn);
  }

  private async remove(): Promise<void> {
    // Stop waiting on execs first: force-removal kills their processes anyway.
    for (const ctl of this.running) ctl.abort();
    try {
      // The cost ledger's figures: read before removal, when Docker still has them. Never blocks the removal.
      this.measured = await stopAndMeasure(this.container);
    } catch (err) {
      this.log.warn({ id: this.id, err: String(err) }, 'could not read the sandbox\'s usage; it is counted without seconds');
    }
    try {
      await removeContainer(this.container);
      this.log.info({ id: this.id, name: this.name }, 'sandbox released');
    } catch (err) {
      // Not rethrown: release runs in `finally` blocks. The janitor never removes its own worker's containers,
      // so the manager retries this one (SandboxManager.removeLeftovers) until dockerd lets it go.
      this.log.error({ id: this.id, err: String(err) }, 'could not remove sandbox container; retried later');
      this.onLeftover?.(this.container);
    }
  }

  private async run(
    argv: string[],
    opts: Omit<SandboxExecOptions, 'stdin'> & { timeoutMs: number; limit: number; stdin?: string | Buffer },
  ): Promise<ExecResult> {
    if (this.releasing) throw new Error(`sandbox ${this.name} was released; acquire a new one`);
    const ctl = new AbortController();
    const signal = opts.signal ? AbortSignal.any([opts.signal, ctl.signal]) : ctl.signal;
    this.running.add(ctl);
    try {
      return await runExec({
        docker: this.docker,
        container: this.container,
        argv,
        timeoutMs: opts.timeoutMs,
        cwd: opts.cwd ? path.posix.resolve(this.home, opts.cwd) : this.home,
        stdin: opts.stdin,
        outputLimitBytes: opts.limit,
        signal,
        log: this.log,
      });
    } finally {
      this.running.delete(ctl);
    }
  }

  /** Runs one of our own scripts; unlike an agent command, failure or a cut output is an error. */
  private async script(
    what: string,
    body: string,
    args: string[],
    opts: { stdin?: string | Buffer; signal?: AbortSignal; timeoutMs?: number } = {},
  ): Promise<string> {
    const res = await this.run(['bash', '-c', body, what, ...args], {
      ...opts,
      timeoutMs: opts.timeoutMs ?? Math.max(this.limits.exec_timeout_s * 1000, 30_000),
      limit: FILE_LIMIT_BYTES,
    });
    if (res.truncated) throw new Error(`sandbox ${this.name}: ${what} output exceeds ${FILE_LIMIT_BYTES} bytes`);
    if (res.exitCode !== 0) {
      const why = res.timedOut ? 'timed out' : `exited with ${res.exitCode}`;
      throw new Error(`sandbox ${this.name}: ${what}(${args.join(', ')}) ${why}: ${res.stderr.trim().slice(0, 2000)}`);
    }
    return res.stdout;
  }
}
