import * as fs from 'node:fs';
import * as path from 'node:path';
import type Docker from 'dockerode';
import type { SandboxConfig } from '../config/schema';
import { paths } from '../shared/paths';

/** The unprivileged user baked into the sandbox image (infra/docker.sh). */
export const AGENT_USER = '1000:1000';
export const WORK_DIR = '/work';
export const REPO_DIR = '/work/repo';
/** /tmp is for tools' scratch files (pytest, mktemp); the agent's work belongs in /work. */
export const TMP_MB = 64;
const MiB = 1024 * 1024;

export type SandboxLimits = Pick<SandboxConfig, 'memory_mb' | 'cpus' | 'pids_limit' | 'disk_mb'> & Partial<Pick<SandboxConfig, 'max_lifetime_s'>>;

/** Used when a caller's limits carry no max_lifetime_s (the config's default). */
export const DEFAULT_MAX_LIFETIME_S = 3600;

export interface ContainerSpec {
  image: string;
  limits: SandboxLimits;
  labels: Record<string, string>;
  name?: string;
  /** Seconds the container lives at most (default: limits.max_lifetime_s, else DEFAULT_MAX_LIFETIME_S). */
  lifetimeS?: number;
}

/**
 * The one place that decides what a sandbox container may do. Pure, so the
 * unit tests can pin every field: no network, no capabilities, no privilege
 * gain, a read-only root with size-capped tmpfs for /work and /tmp, memory
 * without swap, CPU, pid and file limits, no host paths, no worker environment.
 */
export function buildCreateOptions(spec: ContainerSpec): Docker.ContainerCreateOptions {
  const { limits } = spec;
  const memory = limits.memory_mb * MiB;
  const diskBytes = limits.disk_mb * MiB;
  const lifetime = Math.max(1, Math.round(spec.lifetimeS ?? limits.max_lifetime_s ?? DEFAULT_MAX_LIFETIME_S));
  return {
    Image: spec.image,
    ...(spec.name ? { name: spec.name } : {}),
    // The deadline is for people and janitors; the `sleep` below enforces it with no worker alive.
    Labels: { ...spec.labels, [LIFETIME_LABEL]: String(lifetime) },
    User: AGENT_USER,
    WorkingDir: WORK_DIR,
    // Only the image's own ENV (HOME, LANG, PATH): never the worker's variables.
    Env: [],
    // The hard lifetime: when this sleep (tini's only child) ends, tini exits and the container with it.
    Cmd: ['sleep', String(lifetime)],
    Tty: false,
    OpenStdin: false,
    AttachStdin: false,
    AttachStdout: false,
    AttachStderr: false,
    NetworkDisabled: true,
    HostConfig: {
      NetworkMode: 'none',
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Privileged: false,
      ReadonlyRootfs: true,
      // tini as PID 1 reaps orphans; `sleep` would leave zombies that count against the pid limit.
      Init: true,
      Tmpfs: {
        [WORK_DIR]: `rw,nosuid,nodev,size=${limits.disk_mb}m,uid=1000,gid=1000,mode=0755`,
        '/tmp': `rw,nosuid,nodev,size=${TMP_MB}m,mode=1777`,
      },
      Binds: [],
      Mounts: [],
      // Equal to Memory: no swap, so a memory hog is killed instead of thrashing the host.
      Memory: memory,
      MemorySwap: memory,
      NanoCpus: Math.round(limits.cpus * 1e9),
      PidsLimit: limits.pids_limit,
      Ulimits: [
        { Name: 'nofile', Soft: 1024, Hard: 1024 },
        { Name: 'fsize', Soft: diskBytes, Hard: diskBytes },
        { Name: 'core', Soft: 0, Hard: 0 },
      ],
      IpcMode: 'private',
      LogConfig: { Type: 'none', Config: {} },
      RestartPolicy: { Name: 'no' },
      AutoRemove: false,
    },
  };
}

/** The label that records a container's hard lifetime in seconds (from Docker's State.StartedAt). */
export const LIFETIME_LABEL = 'ratchet.max-lifetime-s';

/** Containers with equal keys are interchangeable, which is what lets a warm pool serve them. */
export function poolKey(image: string, limits: SandboxLimits): string {
  return `${image}|mem=${limits.memory_mb}|cpus=${limits.cpus}|pids=${limits.pids_limit}|disk=${limits.disk_mb}|life=${limits.max_lifetime_s ?? DEFAULT_MAX_LIFETIME_S}`;
}

/** The image infra/docker.sh built last (its recipe-hash tag), else the moving `latest` tag. */
export function defaultImage(): string {
  try {
    const tag = fs.readFileSync(path.join(paths.home(), 'sandbox-image'), 'utf8').trim();
    if (tag) return tag;
  } catch {
    // Not built here yet: fall back to the tag infra/docker.sh always sets.
  }
  return 'ratchet-sandbox:latest';
}
