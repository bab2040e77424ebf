import type { Command } from 'commander';
import { controlUpdates } from '../workflows/messages';
import { controlRequest, sendControl } from './control';

export function register(program: Command): void {
  program.command('pause')
    .description('pause a run after its in-flight activities finish (resume with `ratchet resume`)')
    .argument('<run>', 'run id')
    .option('--reason <text>', 'why: recorded with the action, your identity ($USER@host) and the time, in the run\'s step records')
    .addHelpText('after', '\nExamples:\n  $ ratchet pause smoke-1 --reason "reward hacking on step 40; inspecting"')
    .action((run: string, o: { reason?: string }, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, controlUpdates.pause, 'pause', controlRequest(o.reason)));
}
