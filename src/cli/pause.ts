import type { Command } from 'commander';
import { pauseUpdate } from '../workflows/messages';
import { sendControl } from './control';

export function register(program: Command): void {
  program.command('pause')
    .description('pause a run after its in-flight activities finish (resume with `ratchet resume`)')
    .argument('<run>', 'run id')
    .addHelpText('after', '\nExamples:\n  $ ratchet pause smoke-1')
    .action((run: string, _o, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, pauseUpdate, 'pause'));
}
