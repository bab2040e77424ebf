import { Client, Connection, WorkflowNotFoundError } from '@temporalio/client';
import { DEFAULTS } from '../shared/paths';
import { CliError, EXIT } from './exit';

export interface TemporalOptions {
  address?: string;
  namespace?: string;
}

/** Connects to Temporal or fails with exit code 4 and the command that starts the stack. */
export async function connectClient(opts: TemporalOptions = {}): Promise<{ client: Client; close: () => Promise<void> }> {
  const address = opts.address ?? DEFAULTS.temporalAddress;
  const namespace = opts.namespace ?? DEFAULTS.temporalNamespace;
  let connection: Connection;
  try {
    connection = await Connection.connect({ address, connectTimeout: '3s' });
  } catch (err) {
    throw new CliError(`cannot reach Temporal at ${address}: ${(err as Error).message.split('\n')[0]}. ` +
      'Fix: `ratchet up` (or `bash infra/temporal.sh start`), or set TEMPORAL_ADDRESS.', EXIT.stackUnavailable);
  }
  return { client: new Client({ connection, namespace }), close: () => connection.close() };
}

/** Maps "workflow not found" to exit code 3 with the id, leaving other errors alone. */
export function notFound(err: unknown, what: string): never {
  if (err instanceof WorkflowNotFoundError || /not found/i.test((err as Error)?.message ?? '')) {
    throw new CliError(`${what} not found. Fix: list runs with \`ratchet status\`.`, EXIT.notFound);
  }
  throw err;
}

export function workflowUiUrl(workflowId: string, runId?: string, namespace = DEFAULTS.temporalNamespace): string {
  const base = `${DEFAULTS.temporalUi}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  return runId ? `${base}/${encodeURIComponent(runId)}/history` : base;
}
