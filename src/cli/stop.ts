import type { Command } from 'commander';
import { stopAfterCurrentStepUpdate } from '../workflows/messages';
import { sendControl } from './control';

export function register(program: Command): void {
  program.command('stop')
    .description('stop a run cleanly after its current step (its checkpoint and records stay)')
    .argument('<run>', 'run id')
    .addHelpText('after', '\nExamples:\n  $ ratchet stop smoke-1 && ratchet report smoke-1')
    .action((run: string, _o, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, stopAfterCurrentStepUpdate, 'stop after the current step'));
}
