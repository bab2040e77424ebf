import type { Command } from 'commander';
import { stackUp } from '../stack';
import { CliError, EXIT } from './exit';
import { layoutOf, layoutPart } from './layout';
import { c } from './term';

export function register(program: Command): void {
  program.command('up')
    .description('start the local stack in the background: Temporal, dockerd, inference, workers')
    .option('--config <config>', 'bring up what this run config describes on this host: on GPUs (trainer.device = "cuda") its vLLM replicas and the trainer under torchrun (docs/gpu.md); kept for later `ratchet up`')
    .option('--only <part>', 'with --config: start only this part of the layout on this host: trainer (its torchrun job and the supervisor; vLLM, Temporal and the other workers run on other hosts)')
    .addHelpText('after', '\nExamples:\n  $ ratchet up\n  $ ratchet up && ratchet doctor\n  $ ratchet up --config configs/gpu/qwen3-8b-lora-1gpu.toml   # on a GPU host, after bash infra/setup.sh <config>\n' +
      '  $ TEMPORAL_ADDRESS=temporal-host:7233 ratchet up --config configs/gpu/qwen3-14b-4gpu.toml --only trainer   # a host that only trains')
    .action(async (opts: { config?: string; only?: string }) => {
      const only = layoutPart(opts.only);
      if (only && !opts.config) throw new CliError(`--only ${only} needs --config <config>: the part is the config's. Fix: ratchet up --config <config> --only ${only}`, EXIT.usage);
      const config = opts.config ? { path: opts.config, layout: await layoutOf(opts.config, only) } : undefined;
      try {
        await stackUp((e) => console.log(`${c.green(e.state.padEnd(16))} ${e.component.padEnd(18)} ${c.dim(e.log)}`), config);
      } catch (err) {
        throw new CliError(`stack did not start: ${(err as Error).message}`, EXIT.stackUnavailable);
      }
    });
}
