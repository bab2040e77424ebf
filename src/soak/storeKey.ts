/**
 * The store of a soak that plans store-credentials incidents (issue 39): the run's artifacts on the
 * MinIO of infra/minio.sh, and every process of the stack that talks to the store (the workflow,
 * rollout and trainer workers, the soak itself) on one MinIO user of the soak's own. The incident
 * disables that user, as a rotated or expired key leaves a host refused (HTTP 403, InvalidAccessKeyId),
 * and enables it again after --incident-s, as the operator who puts the keys back; the processes keep
 * the key they started with, as a worker keeps the credentials its SDK found.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { REPO_ROOT } from '../shared/paths';
import { minioSettings } from '../stack/minio';
import { MinioAdmin, type MinioAdminSettings } from './minioAdmin';

/** The soak's MinIO user: an access key of its own, so the incident never touches the root account. */
export const SOAK_STORE_USER = 'ratchet-soak';

export interface SoakStore {
  /** [artifacts] of the soak's run config. */
  artifacts: { url: string; endpoint: string };
  /** The soak user's key, which every worker is started with. */
  accessKey: string;
  secretKey: string;
  /** The root account that manages the user (never given to a worker). */
  admin: MinioAdminSettings;
}

/** The environment a process of the soak's stack gets: the soak user's key, which the SDKs (JS and boto3) read first. */
export function storeKeyEnv(store: Pick<SoakStore, 'accessKey' | 'secretKey'>): Record<string, string> {
  return { AWS_ACCESS_KEY_ID: store.accessKey, AWS_SECRET_ACCESS_KEY: store.secretKey, AWS_REGION: 'us-east-1' };
}

/**
 * Creates (or renews) the soak user with a fresh secret and read-write on the buckets, on the MinIO at
 * `minio` (already running), and returns where the run's artifacts go: runs/<run>/ under `prefix`.
 */
export async function createSoakStore(prefix: string, minio = minioSettings(), user = SOAK_STORE_USER): Promise<SoakStore> {
  const admin: MinioAdminSettings = { endpoint: minio.endpoint, accessKey: minio.rootUser, secretKey: minio.rootPassword };
  const secretKey = randomBytes(18).toString('base64url');
  const api = new MinioAdmin(admin);
  await api.addUser(user, secretKey);
  await api.setUserPolicy(user, 'readwrite');
  return { artifacts: { url: `s3://${minio.bucket}/${prefix}`, endpoint: minio.endpoint }, accessKey: user, secretKey, admin };
}

/** The incident and its repair: the soak user's key refused, then accepted again. */
export async function setStoreKey(store: Pick<SoakStore, 'admin' | 'accessKey'>, status: 'enabled' | 'disabled'): Promise<void> {
  await new MinioAdmin(store.admin).setUserStatus(store.accessKey, status);
}

/** The MinIO of infra/minio.sh started if it is not running (idempotent; it is built at set-up: infra/setup.sh). */
export async function startMinio(): Promise<void> {
  await promisify(execFile)('bash', [path.join(REPO_ROOT, 'infra', 'minio.sh'), 'start'], { cwd: REPO_ROOT, timeout: 15 * 60_000 });
}

const AWS_VARS = ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'AWS_SESSION_TOKEN', 'AWS_PROFILE', 'AWS_REGION'] as const;

/**
 * Puts `vars` into this process's environment (what every service it starts inherits, src/stack/processes.ts)
 * and returns the function that puts back what was there. AWS_SESSION_TOKEN and AWS_PROFILE are cleared
 * while the soak's key is in force: either would make an SDK sign with other credentials.
 */
export function swapAwsEnv(vars: Record<string, string>, env: NodeJS.ProcessEnv = process.env): () => void {
  const before = Object.fromEntries(AWS_VARS.map((k) => [k, env[k]]));
  for (const k of AWS_VARS) delete env[k];
  Object.assign(env, vars);
  return () => {
    for (const k of AWS_VARS) {
      if (before[k] === undefined) delete env[k];
      else env[k] = before[k];
    }
  };
}
