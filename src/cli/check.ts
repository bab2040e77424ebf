import type { Command } from 'commander';
import { runChecks, type CheckLine, type CheckReport } from '../check';
import type { TemporalOptions } from './temporal';
import { CliError, EXIT } from './exit';
import { c } from './term';

export function formatCheckLine(l: CheckLine): string {
  const tag = l.level === 'ok' ? c.green('ok  ') : l.level === 'warn' ? c.yellow('warn') : c.red('FAIL');
  return `${tag} ${c.dim(l.section.padEnd(12))} ${l.message}`;
}

/** Exit code of a failed check: the stack alone down is 4 (start it), anything else 5 (fix the input). */
export function checkExitCode(r: CheckReport): number {
  const failed = r.lines.filter((l) => l.level === 'fail');
  if (failed.length === 0) return EXIT.ok;
  return failed.every((l) => l.section === 'stack') ? EXIT.stackUnavailable : EXIT.invalidInput;
}

/** Runs the checks, prints every line, and throws (with the exit code) when one failed. */
export async function checkOrThrow(configPath: string, opts: TemporalOptions & { stack?: boolean; quiet?: boolean }): Promise<CheckReport> {
  const report = await runChecks(configPath, { temporalAddress: opts.address, namespace: opts.namespace, profile: opts.profile, stack: opts.stack });
  for (const l of report.lines) {
    if (opts.quiet && l.level === 'ok') continue;
    (l.level === 'fail' ? console.error : console.log)(formatCheckLine(l));
  }
  const code = checkExitCode(report);
  if (code !== EXIT.ok) {
    const n = report.lines.filter((l) => l.level === 'fail').length;
    throw new CliError(`${configPath}: ${n} check${n === 1 ? '' : 's'} failed; nothing was started. Fix the lines marked FAIL above.`, code);
  }
  return report;
}

export function register(program: Command): void {
  program.command('check')
    .description('validate everything a run needs without starting anything: config, environments, datasets, model, host limits, stack')
    .argument('<config>', 'run config, e.g. configs/swe-grep/smoke.toml')
    .option('--offline', 'skip the stack section (Temporal, inference, dockerd reachability)')
    .addHelpText('after', '\nExit codes: 0 all good (warnings allowed), 5 a config/dataset/model/environment problem, 4 only the stack is unreachable.\n\n' +
      'Examples:\n  $ ratchet check configs/swe-grep/smoke.toml\n  $ ratchet check my-run.toml --offline')
    .action(async (configPath: string, opts: { offline?: boolean }, cmd: Command) => {
      const g = cmd.optsWithGlobals<TemporalOptions>();
      await checkOrThrow(configPath, { ...g, stack: !opts.offline });
      console.log(c.green(`${configPath}: ready to train`));
    });
}
