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

/** A setting is wrong (no such bucket, credentials missing or refused): retrying cannot help. */
export class StoreConfigError extends Error {
  static readonly type = 'StoreConfigError';
  constructor(message: string) {
    super(message);
    this.name = 'StoreConfigError';
  }
}
