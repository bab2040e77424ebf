/**
 * The inference replica pool's arithmetic, shared by the config check, the workflows
 * (deterministic: no I/O) and the weight-sync activity.
 */

/** What a weight sync counts toward its quorum: inference hosts (sync_task_queues) when set, else base URLs. */
export interface ReplicaSettings {
  base_urls: readonly string[];
  sync_task_queues?: readonly string[];
  sync_quorum?: number;
}

/** How many units a sync reaches: each host's own worker (sync_task_queues), or each base URL. */
export function syncUnits(i: ReplicaSettings): number {
  return i.sync_task_queues && i.sync_task_queues.length > 0 ? i.sync_task_queues.length : i.base_urls.length;
}

/** Strict majority of n: 1 of 1, 2 of 2, 2 of 3, 3 of 4. */
export function majority(n: number): number {
  return Math.floor(n / 2) + 1;
}

/** Replicas (or hosts) that must serve a new version before the step goes on: inference.sync_quorum, else a majority. */
export function syncQuorum(i: ReplicaSettings): number {
  return i.sync_quorum ?? majority(syncUnits(i));
}

/** A base URL without trailing slashes: how a replica is named in records and compared. */
export function replicaName(url: string): string {
  return url.replace(/\/+$/, '');
}
