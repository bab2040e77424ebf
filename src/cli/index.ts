#!/usr/bin/env node
import { Command, CommanderError } from 'commander';
import { DEFAULTS } from '../shared/paths';
import { CliError, EXIT, EXIT_HELP } from './exit';
import { c } from './term';
import * as check from './check';
import * as codecServer from './codecServer';
import * as demos from './demos';
import * as doctor from './doctor';
import * as down from './down';
import * as evalCmd from './eval';
import * as fallback from './fallback';
import * as gc from './gc';
import * as layout from './layout';
import * as lineage from './lineage';
import * as harbor from './harbor';
import * as pause from './pause';
import * as release from './release';
import * as replayStep from './replayStep';
import * as report from './report';
import * as restart from './restart';
import * as resume from './resume';
import * as schedule from './schedule';
import * as set from './set';
import * as status from './status';
import * as stop from './stop';
import * as train from './train';
import * as up from './up';
import * as upgrade from './upgrade';

export function buildProgram(): Command {
  const program = new Command('ratchet')
    .description('Train LLM coding agents with RL on durable Temporal workflows')
    .option('--address <host:port>', 'Temporal frontend (default: TEMPORAL_ADDRESS, the profile\'s address, or 127.0.0.1:7233)')
    .option('--namespace <ns>', 'Temporal namespace (default: TEMPORAL_NAMESPACE, the profile\'s namespace, or "default")')
    .option('--profile <name>', 'temporal.toml profile (default: TEMPORAL_PROFILE, or "default"); see docs/connections.md')
    .showHelpAfterError('(add --help for usage and examples)')
    .addHelpText('after', `\nExamples:\n  $ ratchet up && ratchet doctor\n  $ ratchet train configs/swe-grep/smoke.toml --run-id smoke-1 --wait\n` +
      `  $ ratchet status smoke-1\n  $ ratchet restart smoke-1   # a failed or terminated run, from its last completed step\n  $ ratchet schedule eval --run smoke-1 --every 30m\n  $ ratchet report smoke-1\n\n${EXIT_HELP}\n\nWeb UI: ${DEFAULTS.temporalUi}`);
  for (const m of [up, down, doctor, check, train, status, pause, resume, stop, set, restart, fallback, release, gc, upgrade, layout, lineage, replayStep, evalCmd, schedule, report, harbor, demos, codecServer]) m.register(program);
  // Every subcommand: usage errors exit 2, and --help exits 0, instead of process.exit inside commander.
  const exitOverride = (cmd: Command) => {
    cmd.exitOverride();
    cmd.commands.forEach(exitOverride);
  };
  exitOverride(program);
  return program;
}

export async function main(argv: string[]): Promise<number> {
  const program = buildProgram();
  try {
    await program.parseAsync(argv, { from: 'user' });
    return typeof process.exitCode === 'number' ? process.exitCode : EXIT.ok;
  } catch (err) {
    if (err instanceof CommanderError) {
      // help and version are "errors" to commander; a bad flag or a missing argument is a usage error.
      return err.code === 'commander.helpDisplayed' || err.code === 'commander.version' || err.code === 'commander.help' ? EXIT.ok : EXIT.usage;
    }
    if (err instanceof CliError) {
      console.error(`${c.err.red('error:')} ${err.message}`);
      return err.code;
    }
    console.error(`${c.err.red('error:')} ${(err as Error).stack ?? String(err)}`);
    return EXIT.failure;
  }
}

if (require.main === module) {
  main(process.argv.slice(2)).then((code) => process.exit(code), (err) => { console.error(err); process.exit(EXIT.failure); });
}
