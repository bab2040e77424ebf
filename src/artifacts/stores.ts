import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ApplicationFailure } from '@temporalio/common';
import { paths } from '../shared/paths';
import { DiskFullError, diskFullFrom, StoreConfigError, StoreRefusedError, StoreUnavailableError } from './errors';
import type { ArtifactRef } from './ref';
import type { StoreSettings } from './settings';
import { S3ArtifactStore } from './s3';
import { LocalArtifactStore, type ArtifactStore } from './store';

export type { StoreSettings };

const cache = new Map<string, ArtifactStore>();

/**
 * The store for a run's settings; no url (or no settings) means `fallback`, the
 * worker's default store. One instance per distinct settings (an S3 client keeps
 * its connections).
 */
export function storeFor(settings: StoreSettings | undefined, fallback: ArtifactStore): ArtifactStore {
  const url = settings?.url ?? (settings?.root ? pathUrl(settings.root) : undefined);
  if (!url) return fallback;
  const id = JSON.stringify([url, settings?.endpoint, settings?.region, settings?.force_path_style]);
  let store = cache.get(id);
  if (!store) {
    store = url.startsWith('s3://')
      ? new S3ArtifactStore({ url, endpoint: settings?.endpoint, region: settings?.region, force_path_style: settings?.force_path_style })
      : new LocalArtifactStore(fileURLToPath(url));
    cache.set(id, store);
  }
  return store;
}

function pathUrl(p: string): string {
  return `file://${path.resolve(p)}`;
}

/**
 * This process's default store (workers, CLI): RATCHET_ARTIFACTS_URL when set
 * (s3://bucket/prefix with RATCHET_S3_ENDPOINT / RATCHET_S3_REGION for a non-AWS
 * store), else the local directory (RATCHET_ARTIFACTS or .ratchet/artifacts).
 */
export function defaultStore(): ArtifactStore {
  const url = process.env.RATCHET_ARTIFACTS_URL;
  if (url?.startsWith('s3://')) {
    return storeFor({ url, endpoint: process.env.RATCHET_S3_ENDPOINT || undefined, region: process.env.RATCHET_S3_REGION || undefined }, new LocalArtifactStore());
  }
  if (url?.startsWith('file://')) return new LocalArtifactStore(fileURLToPath(url));
  return new LocalArtifactStore(paths.artifacts());
}

/** A ref is read from the store that wrote it: an s3:// ref with the run's S3 settings, a file:// ref from disk. */
export function storeForRef(ref: ArtifactRef, settings: StoreSettings | undefined, fallback: ArtifactStore): ArtifactStore {
  if (ref.uri.startsWith('file://')) return fallback instanceof LocalArtifactStore ? fallback : new LocalArtifactStore();
  return storeFor(settings, fallback);
}

/**
 * Before a run starts: the store answers, the bucket exists, the credentials work.
 * Throws StoreConfigError / StoreUnavailableError whose messages name the setting and the fix
 * (a refusal, which mid-run is a wait, is a StoreConfigError here).
 */
export async function checkStore(store: ArtifactStore): Promise<void> {
  if (!(store instanceof S3ArtifactStore)) return;
  try {
    await store.check();
    // Reading the bucket is not writing it: a probe object proves both.
    const probe = await store.put('.ratchet-probe', `checked ${new Date().toISOString()}`);
    await store.get(probe);
  } catch (err) {
    // Before a run starts, a refusal (credentials, clock, no bucket) is the config to fix; mid-run the run waits on it.
    if (err instanceof StoreRefusedError) throw new StoreConfigError(err.configMessage);
    throw err;
  }
}

/** Activities report store failures as typed ApplicationFailures the workflow matches on. */
export function asActivityFailure(err: unknown): unknown {
  if (err instanceof StoreUnavailableError) return ApplicationFailure.create({ message: err.message, type: StoreUnavailableError.type, nonRetryable: true });
  if (err instanceof StoreConfigError) return ApplicationFailure.create({ message: err.message, type: StoreConfigError.type, nonRetryable: true });
  // Any write that found its disk full, wherever it was (the store, the S3 download cache): the run waits.
  return diskFullFailure(err) ?? err;
}

/** A full disk as the typed failure the workflows wait on (DiskFull); undefined for any other error. */
export function diskFullFailure(err: unknown): ApplicationFailure | undefined {
  const full = diskFullFrom(err);
  return full && ApplicationFailure.create({ message: full.message, type: DiskFullError.type, nonRetryable: true, details: [{ path: full.path, code: full.code }] });
}

/** Runs an activity body, translating store failures (see asActivityFailure). */
export async function withStoreErrors<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw asActivityFailure(err);
  }
}
