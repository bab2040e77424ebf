import { execFileSync } from 'node:child_process';
import * as path from 'node:path';
import { REPO, STATE } from './stack';

/**
 * A Temporal cluster on PostgreSQL of the test's own (infra/cluster/), beside the
 * local stack's dev server: its own state dir and ports, so it never touches yours.
 */
export interface ClusterSpec {
  dir: string;
  host: string;
  temporalPort: number;
  pgPort: number;
}

export const TEST_CLUSTER: ClusterSpec = { dir: path.join(STATE, 'cluster-it'), host: '127.0.0.1', temporalPort: 27233, pgPort: 25433 };

export function clusterEnv(c: ClusterSpec): NodeJS.ProcessEnv {
  return {
    ...process.env,
    RATCHET_HOME: STATE,
    RATCHET_CLUSTER_DIR: c.dir,
    RATCHET_CLUSTER_HOST: c.host,
    RATCHET_CLUSTER_TEMPORAL_PORT: String(c.temporalPort),
    RATCHET_PG_PORT: String(c.pgPort),
  };
}

/** infra/cluster/temporal-server.sh <verb> for this cluster; its log lines go to the test's stderr. */
export function clusterCtl(c: ClusterSpec, verb: 'start' | 'stop' | 'down' | 'status', timeoutMs = 300_000): string {
  return execFileSync('bash', [path.join(REPO, 'infra', 'cluster', 'temporal-server.sh'), verb], {
    env: clusterEnv(c), encoding: 'utf8', timeout: timeoutMs, stdio: ['ignore', 'pipe', 'inherit'],
  });
}

/** One SQL query against the cluster's PostgreSQL, as its superuser; rows as tab-separated lines. */
export function clusterSql(c: ClusterSpec, db: string, sql: string): string {
  return execFileSync('bash', [path.join(REPO, 'infra', 'cluster', 'postgres.sh'), 'psql', '-d', db, '-qAt', '-F', '\t', '-c', sql], {
    env: clusterEnv(c), encoding: 'utf8', timeout: 30_000,
  }).trim();
}
