import type { Command } from 'commander';
import { formatDoctor, runDoctor } from '../stack';
import { EXIT } from './exit';
import { stdoutColor } from './term';

export function register(program: Command): void {
  program.command('doctor')
    .description('check every component of the stack, one line each, with the fix for a failure')
    .addHelpText('after', '\nExit code 0 when every check passes, 4 otherwise.\n\nExamples:\n  $ ratchet doctor\n  $ ratchet doctor || ratchet up')
    .action(async (_opts, cmd: Command) => {
      const g = cmd.optsWithGlobals<{ address?: string; namespace?: string; profile?: string }>();
      const results = await runDoctor({ temporalAddress: g.address, namespace: g.namespace, profile: g.profile });
      console.log(formatDoctor(results, stdoutColor()));
      if (results.some((r) => !r.ok)) process.exitCode = EXIT.stackUnavailable;
    });
}
