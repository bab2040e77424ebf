import type { RunConfig } from '../config/schema';
import { fail, type CheckLine } from './types';

/**
 * A run's new weights reach vLLM by weight sync, which loads LoRA adapters only
 * (src/activities/weightSync.ts). A full fine-tuning config would start, train its first step and
 * fail at its first sync (WeightSyncRefused), so `ratchet check` (and `ratchet train`, which runs it
 * first) refuses it before anything starts. What a full-weight sync needs: docs/gpu.md, "Full fine-tuning".
 */
export function checkWeightSync(config: RunConfig): CheckLine[] {
  if (config.trainer.mode !== 'full') return [];
  return [fail('config', 'trainer.mode: "full" trains every weight, but weight sync hands vLLM LoRA adapters only: the run would start, ' +
    'train its first step and fail at its first sync (WeightSyncRefused). Fix: set trainer.mode = "lora" with a [trainer.lora] rank ' +
    '(configs/gpu/qwen3-14b-4gpu.toml trains this way); full-weight sync is not built yet (docs/gpu.md, "Full fine-tuning")')];
}
