import { NativeConnection } from '@temporalio/worker';
import type { DataConverter } from '@temporalio/common';
import {
  classifyConnectError, describeSettings, explainConnectError, resolveConnection, type ConnectionFlags,
} from '../connection';
import type { Logger } from '../shared/logger';

export interface WorkerConnection {
  connection: NativeConnection;
  namespace: string;
  /** Pass to Worker.create: carries the payload codec when RATCHET_CODEC_KEY is set. */
  dataConverter: DataConverter;
}

/**
 * Connects to the Temporal frontend the profile names (temporal.toml, TEMPORAL_*),
 * retrying while it is unreachable (the stack starts its parts in parallel). A bad
 * setting (a CA that does not match, a rejected client certificate, a bad codec
 * key) fails at once with the setting's name: waiting cannot fix it.
 */
export async function connectWorker(log: Logger, attempts = 60, flags: ConnectionFlags = {}): Promise<WorkerConnection> {
  const { settings, connectionOptions, dataConverter, codec } = resolveConnection(flags);
  log.info({ temporal: describeSettings(settings), codec: codec ? `AES-256-GCM, key id ${codec.keyId}` : 'off' }, 'Temporal connection');
  for (let i = 1; ; i++) {
    try {
      const connection = await NativeConnection.connect(connectionOptions);
      return { connection, namespace: settings.namespace, dataConverter };
    } catch (err) {
      if (classifyConnectError(err) !== 'unreachable' || i >= attempts) {
        throw new Error(`${explainConnectError(err, settings)}${i > 1 ? ` (after ${i} tries)` : ''}`);
      }
      log.warn({ address: settings.address, attempt: i }, 'Temporal not reachable yet; retrying');
      await new Promise((r) => setTimeout(r, 1000));
    }
  }
}
