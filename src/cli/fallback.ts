/**
 * `ratchet fallback revert <run> --reason "..."`: undo the run's newest checkpoint fallback (src/records/revert.ts),
 * recorded with who and why like a control action. Only for a run that is not running and not completed
 * (the state it writes is what `ratchet restart` resumes from); the state before the fallback must verify.
 */
import type { Command } from 'commander';
import { DiskFullError, StoreUnavailableError } from '../artifacts/errors';
import { runKeys } from '../artifacts/keys';
import { commitRevert, planRevert, RevertError } from '../records/revert';
import { callerIdentity } from './control';
import { CliError, EXIT } from './exit';
import { runStore } from './runStore';
import { connectClient, describeRun } from './temporal';
import { c } from './term';

const REVERTIBLE = ['FAILED', 'TERMINATED', 'CANCELLED', 'TIMED_OUT'];

export function register(program: Command): void {
  const fallback = program.command('fallback').description('checkpoint fallbacks of a run (docs/operations.md, "Undoing a checkpoint fallback")');
  fallback.command('revert')
    .description('undo the run\'s newest checkpoint fallback: its state goes back to the checkpoint the fallback left, which must verify')
    .argument('<run>', 'run id')
    .requiredOption('--reason <text>', 'why: recorded with your identity ($USER@host) and the time in the revert record')
    .option('--epoch <n>', 'the fallback to revert (its epoch): must be the newest; a check that you revert the one you mean')
    .option('--config <path>', 'the run\'s config, when its [artifacts] store is not the one its memo names')
    .addHelpText('after', '\nExamples:\n  $ ratchet fallback revert smoke-1 --reason "fallback came from a store outage, not corruption"\n  $ ratchet restart smoke-1')
    .action(async (run: string, opts: { reason: string; epoch?: string; config?: string }, cmd: Command) => {
      if (!opts.reason.trim()) throw new CliError('--reason: empty. Fix: --reason "why the fallback was wrong"', EXIT.usage);
      const epoch = opts.epoch === undefined ? undefined : Number(opts.epoch);
      if (epoch !== undefined && !(Number.isInteger(epoch) && epoch > 0)) throw new CliError(`--epoch: "${opts.epoch}" is not a whole number above 0. Fix: --epoch 1`, EXIT.usage);
      const { client, close } = await connectClient(cmd.optsWithGlobals());
      try {
        const status = (await describeRun(client, run)).status.name;
        // Before the store is read: a live run would go on from the fallback's state over the revert, a completed one is history.
        if (!REVERTIBLE.includes(status)) {
          throw new CliError(`run "${run}" is ${status.toLowerCase()}; nothing written. A fallback is reverted only in a run that is not running and not completed. ` +
            (status === 'RUNNING' || status === 'CONTINUED_AS_NEW'
              ? `Fix: ratchet stop ${run} --reason "..." (or terminate it), then ratchet fallback revert ${run}, then ratchet restart ${run}`
              : `Fix: train on from the checkpoint you trust in a new run: ratchet train <config> --init-from ${run}@<step>`), EXIT.failure);
        }
        const store = await runStore(run, { config: opts.config, client: async () => client });
        let plan;
        try {
          plan = await planRevert(store, run, { identity: callerIdentity(), reason: opts.reason, time: new Date().toISOString(), ...(epoch !== undefined ? { epoch } : {}) });
        } catch (err) {
          if (err instanceof RevertError) throw new CliError(`${err.message}; nothing written`, EXIT.failure);
          if (err instanceof StoreUnavailableError || err instanceof DiskFullError) {
            throw new CliError(`could not verify run "${run}"'s checkpoint: ${err.message}\nNothing written. Fix: rerun when the store answers (or the disk has space)`, EXIT.notReady);
          }
          throw err;
        }
        await commitRevert(store, plan);
        const r = plan.record;
        console.log(`${c.green('reverted')} the fallback of epoch ${r.reverts} of ${c.bold(run)}: its state is step ${r.restored.step} again ` +
          `(policy v${r.restored.policy_version}, ${r.restored.checkpoint?.uri ?? 'no checkpoint'}); records of epoch ${r.reverts} are void ` +
          `(recorded in ${runKeys.records(run)}/reverts, epoch ${r.epoch}). Go on: ratchet restart ${run}`);
      } finally {
        await close();
      }
    });
}
