import * as os from 'node:os';
import Docker from 'dockerode';
import { componentLogger, type Logger } from '../shared/logger';
import { LABELS, parseWorkerId } from './labels';

export interface JanitorOptions {
  /** Containers older than this go whoever made them; a backstop for workers on other hosts and reused pids. */
  maxAgeMs?: number;
  hostname?: string;
  isAlive?: (pid: number) => boolean;
  now?: () => number;
  log?: Logger;
}

export const DEFAULT_MAX_AGE_MS = 3 * 60 * 60 * 1000;

/** Why a labelled container should go, or null to keep it. Pure. */
export function removalReason(
  labels: Record<string, string>,
  ctx: { hostname: string; now: number; maxAgeMs: number; isAlive: (pid: number) => boolean },
): string | null {
  const created = Date.parse(labels[LABELS.created] ?? '');
  if (Number.isFinite(created) && ctx.now - created > ctx.maxAgeMs) return 'older than max age';
  const worker = parseWorkerId(labels[LABELS.worker] ?? '');
  if (!worker) return 'no valid worker label';
  // A pid means nothing on another host: those wait for max age (or that host's janitor).
  if (worker.host === ctx.hostname && !ctx.isAlive(worker.pid)) return 'worker is dead';
  return null;
}

export function pidAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: the pid exists but belongs to another user.
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/** Removes Ratchet containers whose worker died or that outlived maxAgeMs. Call at worker start and periodically. */
export async function sweep(docker: Docker, opts: JanitorOptions = {}): Promise<{ removed: string[]; kept: number }> {
  const log = opts.log ?? componentLogger('sandbox');
  const ctx = {
    hostname: opts.hostname ?? os.hostname(),
    now: (opts.now ?? Date.now)(),
    maxAgeMs: opts.maxAgeMs ?? DEFAULT_MAX_AGE_MS,
    isAlive: opts.isAlive ?? pidAlive,
  };
  const containers = await docker.listContainers({ all: true, filters: { label: [LABELS.worker] } });
  const removed: string[] = [];
  for (const info of containers) {
    const reason = removalReason(info.Labels ?? {}, ctx);
    if (!reason) continue;
    try {
      await docker.getContainer(info.Id).remove({ force: true, v: true });
      removed.push(info.Id);
      log.info({ id: info.Id, name: info.Names?.[0], worker: info.Labels?.[LABELS.worker], reason }, 'janitor removed sandbox');
    } catch (err) {
      if ((err as { statusCode?: number }).statusCode !== 404) log.warn({ id: info.Id, err: String(err) }, 'janitor could not remove sandbox');
    }
  }
  return { removed, kept: containers.length - removed.length };
}

/** Sweeps now and every intervalMs until stopped; the timer does not keep the process alive. */
export function startJanitor(docker: Docker, opts: JanitorOptions & { intervalMs?: number } = {}): { stop: () => void } {
  const log = opts.log ?? componentLogger('sandbox');
  const tick = () => {
    sweep(docker, opts).catch((err: unknown) => log.warn({ err: String(err) }, 'janitor sweep failed'));
  };
  tick();
  const timer = setInterval(tick, opts.intervalMs ?? 5 * 60 * 1000);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}
