import { Client, Connection, WorkflowNotFoundError, type WorkflowExecutionDescription } from '@temporalio/client';
import { ConnectionConfigError, explainConnectFailure, resolveConnection, type ResolvedConnection } from '../connection';
import { DEFAULTS } from '../shared/paths';
import { CliError, EXIT } from './exit';

/** The global flags; unset ones come from TEMPORAL_* and the temporal.toml profile, then the defaults. */
export interface TemporalOptions {
  address?: string;
  namespace?: string;
  profile?: string;
}

/** Resolves the connection or fails with exit code 5 naming the setting (a bad profile, certificate or codec key). */
export function resolveCliConnection(opts: TemporalOptions = {}): ResolvedConnection {
  try {
    return resolveConnection({ address: opts.address, namespace: opts.namespace, profile: opts.profile });
  } catch (err) {
    if (err instanceof ConnectionConfigError) throw new CliError(err.message, EXIT.invalidInput);
    throw err;
  }
}

/** Connects to Temporal or fails with exit code 4, the setting to fix and the command that starts the stack. */
export async function connectClient(opts: TemporalOptions = {}): Promise<{ client: Client; close: () => Promise<void>; resolved: ResolvedConnection }> {
  const resolved = resolveCliConnection(opts);
  let connection: Connection;
  try {
    connection = await Connection.connect({ ...resolved.connectionOptions, connectTimeout: '3s' });
  } catch (err) {
    throw new CliError(await explainConnectFailure(err, resolved.settings), EXIT.stackUnavailable);
  }
  const client = new Client({ connection, namespace: resolved.settings.namespace, dataConverter: resolved.dataConverter });
  return { client, close: () => connection.close(), resolved };
}

/** Maps "workflow not found" to exit code 3 with the id, leaving other errors alone. */
export function notFound(err: unknown, what: string): never {
  if (err instanceof WorkflowNotFoundError || /not found/i.test((err as Error)?.message ?? '')) {
    throw new CliError(`${what} not found. Fix: list runs with \`ratchet status\`.`, EXIT.notFound);
  }
  throw err;
}

/** A run's execution as Temporal describes it (status, type), or exit 3 naming the run. */
export async function describeRun(client: Client, run: string): Promise<WorkflowExecutionDescription> {
  try {
    return await client.workflow.getHandle(run).describe();
  } catch (err) {
    notFound(err, `run "${run}"`);
  }
}

export function workflowUiUrl(workflowId: string, runId?: string, namespace = DEFAULTS.temporalNamespace): string {
  const base = `${DEFAULTS.temporalUi}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(workflowId)}`;
  return runId ? `${base}/${encodeURIComponent(runId)}/history` : base;
}
