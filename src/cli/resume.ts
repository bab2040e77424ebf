import type { Command } from 'commander';
import { resumeUpdate } from '../workflows/messages';
import { sendControl } from './control';

export function register(program: Command): void {
  program.command('resume')
    .description('resume a paused run')
    .argument('<run>', 'run id')
    .addHelpText('after', '\nExamples:\n  $ ratchet resume smoke-1')
    .action((run: string, _o, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, resumeUpdate, 'resume'));
}
