import * as os from 'node:os';

/** Docker labels that mark a container as Ratchet's; the janitor finds them by these. */
export const LABELS = {
  run: 'ratchet.run',
  step: 'ratchet.step',
  rollout: 'ratchet.rollout',
  worker: 'ratchet.worker',
  created: 'ratchet.created',
  /** Set on warm-pool containers: Docker cannot relabel a container once created. */
  pool: 'ratchet.pool',
} as const;

export interface RolloutLabels {
  run: string;
  step: number;
  rollout: string;
}

/** This process as the janitor sees it: `<hostname>:<pid>`. */
export function currentWorkerId(): string {
  return `${os.hostname()}:${process.pid}`;
}

export function parseWorkerId(id: string): { host: string; pid: number } | null {
  const cut = id.lastIndexOf(':');
  if (cut <= 0) return null;
  const pid = Number(id.slice(cut + 1));
  if (!Number.isInteger(pid) || pid <= 0) return null;
  return { host: id.slice(0, cut), pid };
}

/** Container names allow [a-zA-Z0-9][a-zA-Z0-9_.-]*; anything else becomes "-". */
export function containerName(labels: RolloutLabels, suffix: string): string {
  const raw = `ratchet-${labels.run}-s${labels.step}-${labels.rollout}-${suffix}`;
  return raw.replace(/[^a-zA-Z0-9_.-]/g, '-').slice(0, 200);
}
