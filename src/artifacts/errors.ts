/**
 * Store failures the workflow treats differently. Pure (no I/O): activities turn
 * them into ApplicationFailures whose `type` the workflow matches.
 */

/** The store cannot be reached right now (connection refused, timeout, 5xx): the run waits and retries. */
export class StoreUnavailableError extends Error {
  static readonly type = 'StoreUnavailable';
  constructor(readonly storeUrl: string, detail: string) {
    super(`artifact store ${storeUrl} is unreachable: ${detail}. The run waits (status waiting-for-store) and resumes when it is back. ` +
      'Fix: start the store, or check [artifacts] endpoint and the network between this host and the store');
    this.name = 'StoreUnavailableError';
  }
}

/**
 * The store answered but refused this host (credentials refused, rotated or expired, a token expired,
 * the host's clock too far off, the bucket gone). Mid-run an operator fixes these (new keys, the
 * clock, the bucket recreated), so the run waits like for an unreachable store (its type is
 * StoreUnavailable), with the store's error named. Before a run starts (checkStore, in openRun) it is
 * a StoreConfigError with `configMessage`.
 */
export class StoreRefusedError extends StoreUnavailableError {
  constructor(storeUrl: string, readonly storeError: string, readonly configMessage: string, fix: string) {
    super(storeUrl, `the store refused the request (${storeError})`);
    this.message = `artifact store ${storeUrl} refused the request (${storeError}). The run waits (status waiting-for-store) and resumes when it is accepted again. Fix: ${fix}`;
    this.name = 'StoreRefusedError';
  }
}

/** A setting is wrong (no such bucket, credentials missing or refused, at the start): retrying cannot help. */
export class StoreConfigError extends Error {
  static readonly type = 'StoreConfigError';
  constructor(message: string) {
    super(message);
    this.name = 'StoreConfigError';
  }
}

/** Errno codes of a full disk: no space left, or the user's quota spent. */
const DISK_FULL_CODES = new Set(['ENOSPC', 'EDQUOT']);

/**
 * A write found its disk full (ENOSPC/EDQUOT): an operator frees space, and the run,
 * waiting with status waiting-for-disk, goes on by itself. Retrying the write whole is
 * safe: every store write is atomic (a temp file renamed into place) and keyed.
 */
export class DiskFullError extends Error {
  static readonly type = 'DiskFull';
  constructor(readonly path: string, readonly code: string) {
    super(`disk full writing ${path} (${code}). The run waits (status waiting-for-disk) and resumes when space is freed. ` +
      'Fix: free space on that filesystem (old runs under the artifacts root, the S3 download cache .cache/s3), or raise the quota');
    this.name = 'DiskFullError';
  }
}

/** The DiskFullError an error is (ENOSPC/EDQUOT, with the path Node names, else `fallbackPath`); undefined otherwise. */
export function diskFullFrom(err: unknown, fallbackPath?: string): DiskFullError | undefined {
  if (err instanceof DiskFullError) return err;
  const e = err as NodeJS.ErrnoException | undefined;
  if (!e || typeof e.code !== 'string' || !DISK_FULL_CODES.has(e.code)) return undefined;
  return new DiskFullError(e.path ?? fallbackPath ?? 'an unknown path', e.code);
}
