import type { Command } from 'commander';
import { stackUp } from '../stack';
import { CliError, EXIT } from './exit';
import { c } from './term';

export function register(program: Command): void {
  program.command('up')
    .description('start the local stack in the background: Temporal, dockerd, inference, workers')
    .addHelpText('after', '\nExamples:\n  $ ratchet up\n  $ ratchet up && ratchet doctor')
    .action(async () => {
      try {
        await stackUp((e) => console.log(`${c.green(e.state.padEnd(16))} ${e.component.padEnd(18)} ${c.dim(e.log)}`));
      } catch (err) {
        throw new CliError(`stack did not start: ${(err as Error).message}`, EXIT.stackUnavailable);
      }
    });
}
