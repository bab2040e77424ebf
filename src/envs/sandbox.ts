import type { SandboxConfig } from '../config/schema';

/**
 * The sandbox as environments and the rollout activity see it. The real
 * implementation (src/sandbox/, dockerode) satisfies this structurally; unit
 * tests use an in-memory fake. The repository is at /work/repo in the sandbox.
 */
export const REPO_DIR = '/work/repo';

export interface ExecResult {
  /** null when the host had to give up on the exec (src/sandbox/exec.ts: HOST_SLACK_MS) or the container went away. */
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
  /** After release, what the container cost by Docker's records (src/sandbox/usage.ts); fakes have none. */
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
  /** The image acquire(opts) runs, by id (src/sandbox/imageDigest.ts), for the lineage; fakes may leave it out. */
  imageDigest?(opts: Pick<AcquireOptions, 'image' | 'limits'>): Promise<{ name: string; id: string; repo_digests: string[] }>;
}

/** A tool observation from an exec: exit code, both streams, and why it was cut short. */
export function formatExec(r: ExecResult): string {
  const parts: string[] = [];
  if (r.stdout) parts.push(r.stdout.trimEnd());
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.trimEnd()}`);
  if (r.truncated) parts.push('[output truncated: narrow the command, e.g. pipe through head or grep]');
  if (r.timedOut) parts.push(`[timed out after ${Math.round(r.durationMs / 1000)}s and was killed]`);
  parts.push(`[exit code ${r.exitCode ?? 'none'}]`);
  return parts.join('\n');
}

/** Single-quotes a string for bash. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
