import type { Command } from 'commander';
import { ConfigError, loadRunConfig } from '../config/load';
import { commandLine, LAYOUT_PARTS, layoutEnv, LayoutError, stackLayout, type LayoutPart, type StackLayout } from '../layout';
import { ratchetHome, REPO_ROOT } from '../shared/paths';
import { CliError, EXIT } from './exit';

/** The --only flag's value: a part of the layout (src/layout LAYOUT_PARTS), or a usage error. */
export function layoutPart(only: string | undefined): LayoutPart | undefined {
  if (only === undefined) return undefined;
  if (!(LAYOUT_PARTS as readonly string[]).includes(only)) {
    throw new CliError(`--only ${only}: not a part of the layout (${LAYOUT_PARTS.join(', ')}). Fix: e.g. --only trainer on a GPU host that trains while vLLM serves from other hosts`, EXIT.usage);
  }
  return only as LayoutPart;
}

/** The config's layout on this host (src/layout), or a CliError naming the key to fix. */
export async function layoutOf(configPath: string, only?: LayoutPart): Promise<StackLayout> {
  try {
    const { config } = await loadRunConfig(configPath);
    return stackLayout(config, { root: REPO_ROOT, home: ratchetHome() }, only ? { only } : {});
  } catch (err) {
    if (err instanceof ConfigError) throw new CliError(err.message, EXIT.invalidInput);
    if (err instanceof LayoutError) throw new CliError(`${configPath}: ${err.message}`, EXIT.invalidInput);
    throw err;
  }
}

export function register(program: Command): void {
  program.command('layout')
    .description('print what `ratchet up --config <config>` starts on this host: processes, GPUs, flags, environment (starts nothing)')
    .argument('<config>', 'run config (TOML)')
    .option('--format <format>', 'json | env (KEY=value lines for a shell script) | commands (one shell command line per process)', 'json')
    .option('--only <part>', 'the part this host runs alone: trainer (vLLM serves from other hosts)')
    .addHelpText('after', '\nExamples:\n  $ ratchet layout configs/gpu/qwen3-8b-lora-1gpu.toml --format commands\n  $ eval "$(ratchet layout configs/gpu/qwen3-4b-4gpu.toml --format env)"')
    .action(async (configPath: string, opts: { format: string; only?: string }) => {
      const l = await layoutOf(configPath, layoutPart(opts.only));
      if (opts.format === 'json') console.log(JSON.stringify(l, null, 2));
      else if (opts.format === 'env') console.log(layoutEnv(l));
      else if (opts.format === 'commands') {
        if (l.kind === 'cpu') console.log('# CPU layout: ratchet up starts the CPU stack (infra/inference.sh, the trainer as one process)');
        else for (const p of [...l.inference, l.trainer]) console.log(`# ${p.name}\n(cd ${p.cwd} && ${commandLine(p)})`);
      } else throw new CliError(`--format ${opts.format}: not one of json, env, commands. Fix: e.g. --format env`, EXIT.usage);
    });
}
