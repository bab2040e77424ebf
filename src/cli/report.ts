import type { Command } from 'commander';
import { defaultStore, storeFor } from '../artifacts/stores';
import { generateReport, RunDataError } from '../report';
import { CliError, EXIT } from './exit';
import { runArtifactsIfReachable } from './runStore';
import { c, fmtMs } from './term';

export function register(program: Command): void {
  program.command('report')
    .description('write a single-file HTML report of a run (opens offline)')
    .argument('<run>', 'run id (the TrainRun workflow id)')
    .option('-o, --out <file>', 'where to write the HTML (default: <artifacts>/runs/<run>/report.html)')
    .option('--baseline <run>', "draw another run's mean reward beside this run's (a control run, say); read from the same store")
    .option('--config <file>', "the run's config file: read the run from its [artifacts] store (default: the store the run recorded in its memo)")
    .addHelpText('after', '\nExit codes: 3 when the run does not exist, 6 when it has no finished step yet.\n\n' +
      'Examples:\n  $ ratchet report smoke-1\n  $ ratchet report bench-learn-1 --baseline bench-learn-control-1\n  $ ratchet report smoke-1 --out /tmp/smoke-1.html && xdg-open /tmp/smoke-1.html')
    .action(async (run: string, opts: { out?: string; config?: string; baseline?: string }, cmd: Command) => {
      // Without --config the run's memo says where it lives; no reachable Temporal server means the default store.
      const artifacts = await runArtifactsIfReachable(run, opts.config, cmd.optsWithGlobals());
      try {
        const r = await generateReport(run, { out: opts.out, baseline: opts.baseline, store: storeFor(artifacts, defaultStore()) });
        for (const s of r.skippedEvals) console.error(c.err.yellow(`skipped eval result ${s}`));
        console.log(`${c.green('wrote')} ${r.file} ${c.dim(`(${r.steps} steps, ${r.evals} eval results, ${(r.bytes / 1024).toFixed(0)} KiB, ${fmtMs(r.ms)})`)}`);
      } catch (err) {
        if (err instanceof RunDataError) {
          throw new CliError(err.message, err.kind === 'not-found' ? EXIT.notFound : err.kind === 'empty' ? EXIT.notReady : EXIT.invalidInput);
        }
        throw err;
      }
    });
}
