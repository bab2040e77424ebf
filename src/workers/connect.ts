import { NativeConnection } from '@temporalio/worker';
import { DEFAULTS } from '../shared/paths';
import type { Logger } from '../shared/logger';

/** Connects to the Temporal frontend, retrying while it starts (the stack starts its parts in parallel). */
export async function connectWorker(log: Logger, attempts = 60): Promise<NativeConnection> {
  for (let i = 1; ; i++) {
    try {
      return await NativeConnection.connect({ address: DEFAULTS.temporalAddress });
    } catch (err) {
      if (i >= attempts) {
        throw new Error(`cannot reach Temporal at ${DEFAULTS.temporalAddress} after ${attempts} tries: ${(err as Error).message}. ` +
          'Fix: start it with `bash infra/temporal.sh start`, or set TEMPORAL_ADDRESS.');
      }
      log.warn({ address: DEFAULTS.temporalAddress, attempt: i }, 'Temporal not reachable yet; retrying');
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
