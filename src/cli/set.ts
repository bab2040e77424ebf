import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import { setSettingsUpdate } from '../workflows/messages';
import { controlRequest, sendControl } from './control';

const num = (flag: string) => (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`${flag} needs a number, got "${v}"`);
  return n;
};

export function register(program: Command): void {
  program.command('set')
    .description('change a running run\'s learning rate or staleness bound from its next step boundary (validated and recorded with your identity and reason)')
    .argument('<run>', 'run id')
    .option('--lr <rate>', 'trainer.optim.lr from the next step on (0 to 1)', num('--lr'))
    .option('--async-level <n>', 'orchestrator.async_level, how many versions a rollout may lag (0 to 8)', num('--async-level'))
    .requiredOption('--reason <text>', 'why: recorded with the change in the run\'s step records')
    .addHelpText('after', '\nExamples:\n  $ ratchet set smoke-1 --lr 5e-6 --reason "loss spikes since step 30"\n  $ ratchet set smoke-1 --async-level 0 --reason "staleness too high"')
    .action((run: string, o: { lr?: number; asyncLevel?: number; reason: string }, cmd: Command) => sendControl(
      cmd.optsWithGlobals(), run, setSettingsUpdate, 'change settings',
      { ...controlRequest(o.reason), ...(o.lr !== undefined ? { learning_rate: o.lr } : {}), ...(o.asyncLevel !== undefined ? { async_level: o.asyncLevel } : {}) },
    ));
}
