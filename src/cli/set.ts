import type { Command } from 'commander';
import { InvalidArgumentError } from 'commander';
import type { SettingsChange } from '../contracts/run';
import { setSettingsUpdate } from '../workflows/messages';
import { validateSettings } from '../workflows/runControl';
import { controlRequest, sendControl } from './control';
import { COST_KEYS } from '../shared/cost';

/** --budget <figure>=<value>, repeatable: the cost ledger's figures (docs/operations.md). */
export function parseBudget(v: string, prev: Record<string, number> = {}): Record<string, number> {
  const m = /^([a-z_]+)=(.+)$/.exec(v.trim());
  if (!m) throw new InvalidArgumentError(`--budget needs <figure>=<value>, e.g. sandbox_cpu_s=7200 (got "${v}")`);
  const [, key, raw] = m as unknown as [string, string, string];
  const figure = key.replace(/^max_/, '');
  if (!(COST_KEYS as readonly string[]).includes(figure)) throw new InvalidArgumentError(`--budget: unknown figure ${key}; the figures are ${COST_KEYS.join(', ')}`);
  const n = Number(raw);
  if (!Number.isFinite(n) || n <= 0) throw new InvalidArgumentError(`--budget ${figure} needs a number above 0, got "${raw}"`);
  return { ...prev, [figure]: n };
}
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
  budget?: Record<string, number>;
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
    ...(o.budget ? { budget: o.budget } : {}),
  };
  try {
    validateSettings(change);
  } catch (err) {
    throw new CliError(`${(err as Error).message}. Flags: --lr, --async-level, --eval-every, --budget`, EXIT.usage);
  }
  return change;
}

export function register(program: Command): void {
  program.command('set')
    .description('change a running run\'s learning rate, staleness bound, eval cadence or budgets from its next step boundary (validated and recorded with your identity and reason)')
    .argument('<run>', 'run id')
    .option('--lr <rate>', 'trainer.optim.lr from the next step on (0 to 1)', num('--lr'))
    .option('--async-level <n>', 'orchestrator.async_level, how many versions a rollout may lag (0 to 8)', num('--async-level'))
    .option('--eval-every <n>', 'eval.every_steps: an EvalSweep of the new checkpoint after every n-th step (0: off)', num('--eval-every'))
    .option('--budget <figure=value>', 'raise or set a budget ([budget] max_<figure>), e.g. sandbox_cpu_s=7200; repeatable. A budget-exhausted run goes on once none is reached', parseBudget)
    .requiredOption('--reason <text>', 'why: recorded with the change in the run\'s step records')
    .addHelpText('after', '\nExamples:\n  $ ratchet set smoke-1 --lr 5e-6 --reason "loss spikes since step 30"\n  $ ratchet set smoke-1 --async-level 0 --reason "staleness too high"\n' +
      '  $ ratchet set smoke-1 --eval-every 10 --reason "watch held-out pass@1 while lr is lower"\n' +
      '  $ ratchet set smoke-1 --budget sandbox_cpu_s=7200 --reason "approved by the team lead"')
    .action((run: string, o: SetFlags, cmd: Command) => sendControl(cmd.optsWithGlobals(), run, setSettingsUpdate, 'change settings', settingsChangeOf(o)));
}
