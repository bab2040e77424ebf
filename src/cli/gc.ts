/**
 * `ratchet gc <run>`: [artifacts.retention] applied to a finished run (src/records/retention.ts): the
 * checkpoints it no longer needs, the optimizer state of the adapters it keeps, every turn journal.
 * `--dry-run` lists what would go and deletes nothing. Only for a run that is not running: a live run
 * applies its own retention after each step.
 */
import type { Command } from 'commander';
import { RetentionConfig } from '../config/schema';
import { isPrunable } from '../artifacts/store';
import { readRunRecords, readRunState } from '../records/runRecords';
import { applyRetention, listForRetention, planRetention, retentionOf, type RetentionPlan } from '../records/retention';
import { CliError, EXIT } from './exit';
import { runStore } from './runStore';
import { connectClient, describeRun } from './temporal';
import { c } from './term';

const FINISHED = ['COMPLETED', 'FAILED', 'TERMINATED', 'CANCELLED', 'TIMED_OUT'];

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

function intFlag(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) throw new CliError(`--${name}: "${v}" is not a whole number >= ${min}. Fix: e.g. --${name} ${Math.max(min, 2)}`, EXIT.usage);
  return n;
}

/** What the plan deletes, a line per checkpoint and one for the journals. */
export function describePlan(plan: RetentionPlan): string[] {
  const lines: string[] = [];
  for (const ck of plan.checkpoints) {
    const gone = plan.delete.filter((d) => d.key.includes(`/checkpoints/${ck.dir}/`));
    if (!gone.length) continue;
    const what = ck.keep === 'adapter' ? 'optimizer and trainer state (adapter kept)' : 'whole checkpoint';
    lines.push(`  ${ck.dir}: ${what}, ${gone.length} files, ${mib(gone.reduce((a, d) => a + d.bytes, 0))} (${ck.why})`);
  }
  const journals = plan.delete.filter((d) => d.key.includes('.journal/'));
  if (journals.length) lines.push(`  turn journals: ${journals.length} files, ${mib(journals.reduce((a, d) => a + d.bytes, 0))}`);
  return lines;
}

export function register(program: Command): void {
  program.command('gc')
    .description('delete what a finished run no longer needs ([artifacts.retention]: old checkpoints, optimizer state, turn journals; docs/operations.md)')
    .argument('<run>', 'run id')
    .option('--dry-run', 'list what would be deleted, delete nothing')
    .option('--keep-last <n>', 'checkpoints kept whole, newest first (default: the run\'s [artifacts.retention] keep_last, else 3)')
    .option('--keep-every <m>', 'also keep the adapter of every policy version that is a multiple of m (default: the run\'s keep_every, else 0)')
    .option('--json', 'the plan (or what was deleted) as JSON')
    .option('--config <path>', 'the run\'s config, when its [artifacts] store is not the one its memo names')
    .addHelpText('after', '\nExamples:\n  $ ratchet gc smoke-1 --dry-run\n  $ ratchet gc smoke-1 --keep-last 2 --keep-every 10')
    .action(async (run: string, opts: { dryRun?: boolean; keepLast?: string; keepEvery?: string; json?: boolean; config?: string }, cmd: Command) => {
      const keepLast = intFlag('keep-last', opts.keepLast, 2);
      const keepEvery = intFlag('keep-every', opts.keepEvery, 0);
      const { client, close } = await connectClient(cmd.optsWithGlobals());
      try {
        const status = (await describeRun(client, run)).status.name;
        if (!FINISHED.includes(status)) {
          throw new CliError(`run "${run}" is ${status.toLowerCase()}; nothing deleted. gc is for finished runs (a running one applies its own [artifacts.retention] after each step). ` +
            `Fix: wait for it to end, or ratchet stop ${run} --reason "..."`, EXIT.failure);
        }
        // An eval sweep the run started may still run (abandoned children): its episodes' journals stay then.
        const sweeps = (await client.workflow.count(`WorkflowId STARTS_WITH "${run}-" AND ExecutionStatus = "Running"`)).count;
        const store = await runStore(run, { config: opts.config, client: async () => client });
        if (!isPrunable(store)) throw new CliError(`the store ${store.url} cannot delete; nothing deleted`, EXIT.failure);
        const state = await readRunState(store, run);
        if (!state) throw new CliError(`run "${run}" has no recorded step in ${store.url}; nothing to collect`, EXIT.notReady);
        const policy = RetentionConfig.parse({ ...(await retentionOf(store, run)), ...(keepLast !== undefined ? { keep_last: keepLast } : {}), ...(keepEvery !== undefined ? { keep_every: keepEvery } : {}) });
        const { steps } = await readRunRecords(store, run);
        const input = { runId: run, records: steps, state, policy, finished: sweeps === 0 };
        const plan = planRetention({ ...input, keys: await listForRetention(store, run) });
        if (opts.dryRun) {
          if (opts.json) console.log(JSON.stringify({ run, dry_run: true, policy, ...plan }, null, 2));
          else {
            console.log(`${c.bold(run)}: would delete ${plan.delete.length} files, ${mib(plan.bytes)} (keep_last ${policy.keep_last}, keep_every ${policy.keep_every}); nothing deleted (--dry-run)`);
            for (const l of describePlan(plan)) console.log(l);
          }
          return;
        }
        const record = await applyRetention(store, { ...input, by: 'gc', time: new Date().toISOString() }, plan);
        if (opts.json) console.log(JSON.stringify({ run, ...record }, null, 2));
        else {
          console.log(`${c.green('deleted')} ${plan.delete.length} files, ${mib(plan.bytes)} of ${c.bold(run)} (keep_last ${policy.keep_last}, keep_every ${policy.keep_every})`);
          for (const l of describePlan(plan)) console.log(l);
          if (sweeps) console.log(`  ${sweeps} workflow(s) of the run still running (eval sweeps): their journals are kept`);
        }
      } finally {
        await close();
      }
    });
}
