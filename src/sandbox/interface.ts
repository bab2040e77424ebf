import type { SandboxConfig } from '../config/schema';

/**
 * The sandbox as environments and the rollout activity see it. The real
 * implementation (this folder, dockerode) satisfies this structurally; unit
 * tests use an in-memory fake. The repository is at /work/repo in the sandbox.
 */
export const REPO_DIR = '/work/repo';

export interface ExecResult {
  /** null when the host had to give up on the exec (exec.ts: HOST_SLACK_MS) or the container went away. */
  exitCode: number | null;
  stdout: string;
  stderr: string;
  timedOut: boolean;
  truncated: boolean;
  durationMs: number;
}

export interface ExecOptions {
  timeoutMs?: number;
  cwd?: string;
  stdin?: string;
  signal?: AbortSignal;
}

export interface Sandbox {
  exec(command: string, opts?: ExecOptions): Promise<ExecResult>;
  writeFile(path: string, content: string): Promise<void>;
  readFile(path: string): Promise<string>;
  /** Unified diff of /work/repo against the base commit. */
  diff(): Promise<string>;
  release(): Promise<void>;
  /** After release, what the container cost by Docker's records (usage.ts); fakes have none. */
  usage?(): { container_s: number; cpu_s: number } | undefined;
}

export interface AcquireOptions {
  image?: string;
  repo?: { hostPath: string; baseCommit: string };
  /** The image already holds the repository at dir (SWE-bench's /testbed). */
  imageRepo?: { dir: string; baseCommit: string };
  labels: { run: string; step: number; rollout: string };
  limits: SandboxConfig;
  /** Aborting removes a half-made sandbox. */
  signal?: AbortSignal;
}

export interface SandboxManager {
  acquire(opts: AcquireOptions): Promise<Sandbox>;
  /** The image acquire(opts) runs, by id (imageDigest.ts), for the lineage; fakes may leave it out. */
  imageDigest?(opts: Pick<AcquireOptions, 'image' | 'limits'>): Promise<{ name: string; id: string; repo_digests: string[] }>;
}
