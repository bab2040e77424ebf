import type { Command } from 'commander';
import { controlUpdates } from '../workflows/messages';
import { controlRequest, sendControl } from './control';

export function register(program: Command): void {
  program.command('resume')
    .description('resume a paused run')
    .argument('<run>', 'run id')
    .option('--reason <text>', 'why: recorded with the action, your identity ($USER@host) and the time, in the run\'s step records')
    .addHelpText('after', '\nExamples:\n  $ ratchet resume smoke-1')
    .action((run: string, o: { reason?: string }, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, controlUpdates.resume, 'resume', controlRequest(o.reason)));
}
