import { WorkflowExecutionAlreadyStartedError } from '@temporalio/client';
import type { Command } from 'commander';
import { ConfigError, loadRunConfig } from '../config/load';
import { TASK_QUEUES } from '../shared/paths';
import type { TrainRunInput } from '../workflows/types';
import { CliError, EXIT } from './exit';
import { followRun } from './follow';
import { connectClient, workflowUiUrl } from './temporal';
import { c } from './term';

export function defaultRunId(name: string | undefined, now = new Date()): string {
  const stamp = now.toISOString().replace(/[-:]/g, '').replace(/\..*$/, '').replace('T', '-');
  return `${name ?? 'run'}-${stamp}`;
}

export function register(program: Command): void {
  program.command('train')
    .description('start a TrainRun from a run config (validated here first)')
    .argument('<config>', 'run config, e.g. configs/swe-grep/smoke.toml')
    .option('--run-id <id>', 'workflow id of the run (default: <config name>-<UTC time>); an existing id with a finished step resumes')
    .option('--wait', 'follow the run: one line per step with reward and components, then the Web UI URL')
    .addHelpText('after', '\nExamples:\n  $ ratchet train configs/swe-grep/smoke.toml\n  $ ratchet train configs/swe-grep/smoke.toml --run-id smoke-1 --wait\n\n' +
      'Same as: temporal workflow start --type TrainRun --task-queue ratchet --input \'{"configPath": "..."}\'')
    .action(async (configPath: string, opts: { runId?: string; wait?: boolean }, cmd: Command) => {
      let name: string | undefined;
      try {
        name = (await loadRunConfig(configPath)).config.name;
      } catch (err) {
        if (err instanceof ConfigError) throw new CliError(err.message, EXIT.invalidInput);
        throw err;
      }
      const runId = opts.runId ?? defaultRunId(name);
      if (!/^[A-Za-z0-9._-]+$/.test(runId)) throw new CliError(`--run-id "${runId}": use letters, digits, ".", "_" and "-" only`, EXIT.usage);
      const g = cmd.optsWithGlobals<{ address?: string; namespace?: string }>();
      const { client, close } = await connectClient(g);
      try {
        const input: TrainRunInput = { configPath, runId };
        let handle;
        try {
          handle = await client.workflow.start('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input] });
        } catch (err) {
          if (err instanceof WorkflowExecutionAlreadyStartedError) {
            throw new CliError(`run "${runId}" is already running. Follow it: ratchet status ${runId}; or pick another --run-id`, EXIT.failure);
          }
          throw err;
        }
        console.log(`${c.green('started')} ${c.bold(runId)}  ${workflowUiUrl(runId, handle.firstExecutionRunId)}`);
        if (!opts.wait) {
          console.log(`follow it: ratchet status ${runId}`);
          return;
        }
        const res = await followRun(client, runId);
        console.log(`${c.bold(runId)} ${res.status.toLowerCase()}`);
        console.log(`Web UI:  ${workflowUiUrl(runId)}`);
        console.log(`report:  ratchet report ${runId}`);
        if (res.status !== 'COMPLETED') process.exitCode = EXIT.failure;
      } finally {
        await close();
      }
    });
}
