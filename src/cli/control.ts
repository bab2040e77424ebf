import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import type { UpdateDefinition } from '@temporalio/common';
import type { RunStatus } from '../contracts';
import { CliError, EXIT } from './exit';
import { connectClient, notFound, type TemporalOptions } from './temporal';
import { c } from './term';

/** Sends one of TrainRun's control updates and prints the status it answered. */
export async function sendControl(g: TemporalOptions, run: string, update: UpdateDefinition<RunStatus, []>, verb: string): Promise<void> {
  const { client, close } = await connectClient(g);
  try {
    const status = await execute(client, run, update);
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

async function execute(client: Client, run: string, update: UpdateDefinition<RunStatus, []>): Promise<RunStatus> {
  const handle = client.workflow.getHandle(run);
  const desc = await handle.describe();
  if (desc.status.name !== 'RUNNING') {
    throw new CliError(`${run} is ${desc.status.name.toLowerCase()}, not running: nothing to steer`, EXIT.notReady);
  }
  return handle.executeUpdate(update);
}
