import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { SettingsChange } from '../contracts/run';
import { setSettingsUpdate } from '../workflows/messages';
import { validateSettings } from '../workflows/runControl';
import { controlRequest, sendControl } from './control';
import { CliError, EXIT } from './exit';

const num = (flag: string) => (v: string): number => {
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new InvalidArgumentError(`${flag} needs a number, got "${v}"`);
  return n;
};

export interface SetFlags {
  lr?: number;
  asyncLevel?: number;
  evalEvery?: number;
  reason: string;
}

/**
 * The `setSettings` update `ratchet set` sends, checked here with the workflow's own validator
 * (src/workflows/runControl.ts validateSettings), so a bad value is refused before it travels; the
 * run's validator checks it again (other clients).
 */
export function settingsChangeOf(o: SetFlags): SettingsChange {
  const change: SettingsChange = {
    ...controlRequest(o.reason),
    ...(o.lr !== undefined ? { learning_rate: o.lr } : {}),
    ...(o.asyncLevel !== undefined ? { async_level: o.asyncLevel } : {}),
    ...(o.evalEvery !== undefined ? { eval_every_steps: o.evalEvery } : {}),
  };
  try {
    validateSettings(change);
  } catch (err) {
    throw new CliError(`${(err as Error).message}. Flags: --lr, --async-level, --eval-every`, EXIT.usage);
  }
  return change;
}

export function register(program: Command): void {
  program.command('set')
    .description('change a running run\'s learning rate, staleness bound or eval cadence from its next step boundary (validated and recorded with your identity and reason)')
    .argument('<run>', 'run id')
    .option('--lr <rate>', 'trainer.optim.lr from the next step on (0 to 1)', num('--lr'))
    .option('--async-level <n>', 'orchestrator.async_level, how many versions a rollout may lag (0 to 8)', num('--async-level'))
    .option('--eval-every <n>', 'eval.every_steps: an EvalSweep of the new checkpoint after every n-th step (0: off)', num('--eval-every'))
    .requiredOption('--reason <text>', 'why: recorded with the change in the run\'s step records')
    .addHelpText('after', '\nExamples:\n  $ ratchet set smoke-1 --lr 5e-6 --reason "loss spikes since step 30"\n  $ ratchet set smoke-1 --async-level 0 --reason "staleness too high"\n' +
      '  $ ratchet set smoke-1 --eval-every 10 --reason "watch held-out pass@1 while lr is lower"')
    .action((run: string, o: SetFlags, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, setSettingsUpdate, 'change settings', settingsChangeOf(o)));
}
