import { randomBytes } from 'node:crypto';
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

/**
 * This process as janitors on any host see it: `<host>:<pid>:<nonce>`. The host is
 * RATCHET_HOST_NAME when set (network namespaces share one hostname), and the nonce
 * keeps a restarted worker that got the same pid from inheriting the dead one's lease.
 */
export function currentWorkerId(): string {
  const host = process.env.RATCHET_HOST_NAME || os.hostname();
  return `${host}:${process.pid}:${randomBytes(3).toString('hex')}`;
}

/** Container names allow [a-zA-Z0-9][a-zA-Z0-9_.-]*; anything else becomes "-". */
export function containerName(labels: RolloutLabels, suffix: string): string {
  const raw = `ratchet-${labels.run}-s${labels.step}-${labels.rollout}-${suffix}`;
  return raw.replace(/[^a-zA-Z0-9_.-]/g, '-').slice(0, 200);
}
