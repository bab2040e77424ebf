import * as os from 'node:os';
import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { UpdateDefinition } from '@temporalio/common';
import type { ControlRequest, RunStatus } from '../contracts';
import { CliError, EXIT } from './exit';
import { connectClient, notFound, type TemporalOptions } from './temporal';
import { c } from './term';

/** Who sends a control action, recorded with it: $USER (or the OS account) at this host. */
export function callerIdentity(env: NodeJS.ProcessEnv = process.env): string {
  let user = env.USER || env.LOGNAME;
  if (!user) {
    try {
      user = os.userInfo().username;
    } catch {
      user = 'unknown';
    }
  }
  return `${user}@${os.hostname()}`;
}

/** The request every control update carries: the reason given, and the caller's identity. */
export function controlRequest(reason: string | undefined): ControlRequest {
  return { identity: callerIdentity(), ...(reason !== undefined ? { reason } : {}) };
}

/** Sends one of TrainRun's control updates and prints the status it answered. */
export async function sendControl<R extends ControlRequest>(g: TemporalOptions, run: string, update: UpdateDefinition<RunStatus, [R]>, verb: string, request: R): Promise<void> {
  const { client, close } = await connectClient(g);
  try {
    const status = await execute(client, run, update, request);
    console.log(`${c.bold(run)}: ${verb} → ${c.green(status)}`);
  } catch (err) {
    if (err instanceof WorkflowUpdateFailedError) {
      throw new CliError(`${run} refused to ${verb}: ${(err.cause as Error | undefined)?.message ?? err.message}`, EXIT.failure);
    }
    notFound(err, `run "${run}"`);
  } finally {
    await close();
  }
}

async function execute<R>(client: Client, run: string, update: UpdateDefinition<RunStatus, [R]>, request: R): Promise<RunStatus> {
  const handle = client.workflow.getHandle(run);
  const desc = await handle.describe();
  if (desc.status.name !== 'RUNNING') {
    throw new CliError(`${run} is ${desc.status.name.toLowerCase()}, not running: nothing to steer`, EXIT.notReady);
  }
  return handle.executeUpdate(update, { args: [request] });
}
