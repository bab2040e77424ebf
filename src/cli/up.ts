import type { Command } from 'commander';
import { stackUp } from '../stack';
import { CliError, EXIT } from './exit';
import { layoutOf } from './layout';
import { c } from './term';

export function register(program: Command): void {
  program.command('up')
    .description('start the local stack in the background: Temporal, dockerd, inference, workers')
    .option('--config <config>', 'bring up what this run config describes on this host: on GPUs (trainer.device = "cuda") its vLLM replicas and the trainer under torchrun (docs/gpu.md); kept for later `ratchet up`')
    .addHelpText('after', '\nExamples:\n  $ ratchet up\n  $ ratchet up && ratchet doctor\n  $ ratchet up --config configs/gpu/qwen3-8b-lora-1gpu.toml   # on a GPU host, after bash infra/setup.sh <config>')
    .action(async (opts: { config?: string }) => {
      const config = opts.config ? { path: opts.config, layout: await layoutOf(opts.config) } : undefined;
      try {
        await stackUp((e) => console.log(`${c.green(e.state.padEnd(16))} ${e.component.padEnd(18)} ${c.dim(e.log)}`), config);
      } catch (err) {
        throw new CliError(`stack did not start: ${(err as Error).message}`, EXIT.stackUnavailable);
      }
    });
}
