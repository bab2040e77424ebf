import type { RunConfig } from '../config/schema';
import { FULL_WEIGHTS_ROUTE } from '../activities/weightSync';
import { fail, ok, type CheckLine } from './types';

/**
 * A full fine-tuning run (trainer.mode = "full") serves each version by reloading every replica's weights in
 * place (src/activities/weightSync.ts, infra/vllm/ratchet_weights.py): one set of weights per replica at a
 * time, under inference.served_model. What cannot sync that way is refused here, before anything starts:
 * in-run eval sweeps, which serve a step's checkpoint beside the training version as a LoRA adapter.
 */
export function checkWeightSync(config: RunConfig): CheckLine[] {
  if (config.trainer.mode !== 'full') return [];
  const every = config.eval.every_steps;
  if (every > 0) {
    return [fail('config', `eval.every_steps = ${every}: in-run eval sweeps load a step's checkpoint into vLLM as a LoRA adapter beside the training version, ` +
      'but trainer.mode = "full" has no adapter, and a replica holds one set of full weights at a time (the run\'s newest). ' +
      'Fix: set eval.every_steps = 0 and evaluate a full run\'s checkpoints on a vLLM of their own, or train with trainer.mode = "lora"')];
  }
  return [ok('config', 'trainer.mode = "full": each weight sync reloads every replica\'s weights in place from the step\'s checkpoint (model/), ' +
    'resets its prefix cache and reads back what its workers serve; vLLM needs the ratchet_weights hooks (docs/gpu.md, "Full fine-tuning")')];
}

/**
 * With the stack up: every replica of a full run has the weights route (infra/vllm/ratchet_weights.py). A
 * replica without it would refuse the first sync (WeightSyncRefused) after the first step trained.
 */
export async function checkFullWeightsRoute(config: RunConfig, fetchFn: typeof fetch = fetch): Promise<CheckLine[]> {
  if (config.trainer.mode !== 'full') return [];
  return Promise.all(config.inference.base_urls.map(async (url, i) => {
    const at = `${url.replace(/\/+$/, '')}/${FULL_WEIGHTS_ROUTE}`;
    let status: number;
    try {
      status = (await fetchFn(at, { signal: AbortSignal.timeout(5_000) })).status;
    } catch (err) {
      return fail('stack', `inference.base_urls[${i}] ${url}: could not ask it for full weight sync (${(err as Error).message}). Fix: ratchet up (or bash infra/inference.sh start)`);
    }
    if (status === 200) return ok('stack', `inference ${url} takes full weights (/${FULL_WEIGHTS_ROUTE})`);
    return fail('stack', `inference.base_urls[${i}] ${url} has no /${FULL_WEIGHTS_ROUTE} route (HTTP ${status}), so it cannot take a full fine-tuning run's weights: ` +
      'the run would train its first step and fail at its first sync (WeightSyncRefused). Fix: on the CPU stack, RATCHET_VLLM_FULL_WEIGHTS=1 bash infra/inference.sh restart; ' +
      'on a GPU host, ratchet up --config <this config> starts vLLM with the hooks (docs/gpu.md, "Full fine-tuning")');
  }));
}
