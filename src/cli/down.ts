import type { Command } from 'commander';
import { stackDown } from '../stack';
import { c } from './term';

export function register(program: Command): void {
  program.command('down')
    .description('stop the workers, inference and Temporal (workflow history stays on disk)')
    .addHelpText('after', '\nExamples:\n  $ ratchet down')
    .action(async () => {
      await stackDown((e) => console.log(`${c.yellow(e.state.padEnd(16))} ${e.component.padEnd(18)} ${c.dim(e.log)}`));
    });
}
