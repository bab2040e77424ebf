import type { Command } from 'commander';
import { controlUpdates } from '../workflows/messages';
import { controlRequest, sendControl } from './control';

export function register(program: Command): void {
  program.command('stop')
    .description('stop a run cleanly after its current step (its checkpoint and records stay)')
    .argument('<run>', 'run id')
    .option('--reason <text>', 'why: recorded with the action, your identity ($USER@host) and the time, in the run\'s step records')
    .addHelpText('after', '\nExamples:\n  $ ratchet stop smoke-1 && ratchet report smoke-1')
    .action((run: string, o: { reason?: string }, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, controlUpdates.stop, 'stop after the current step', controlRequest(o.reason)));
}
