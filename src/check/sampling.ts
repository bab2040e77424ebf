import type { RunConfig } from '../config/schema';
import { samplingRecord } from '../contracts/trajectory';
import { ok, warn, type CheckLine } from './types';

/**
 * Which sampling distribution the trainer's ratios compare against (docs/training.md, "One
 * distribution"): `exact` when vLLM samples from the model's whole distribution at the run's
 * temperature, which is what the trainer scores; `truncated` when top_p or top_k narrow it,
 * which the trainer does not rebuild. The batch manifest records the same word
 * (`sampling.distribution_match`), so what check says here is what the run trains under.
 */
export function checkSampling(config: RunConfig): CheckLine[] {
  const s = config.sampling;
  const record = samplingRecord(s);
  const prompts = s.history === 'tokens'
    ? 'each turn\'s prompt extends the last prompt and the sampled ids (one sample an episode)'
    : 'the chat template renders every turn\'s prompt anew (a sample ends where it rewrote a sampled turn)';
  const forced = s.tool_choice === 'required' ? '; tool_choice "required" writes the tool-call opening as prompt, never trained' : '';
  if (record.distribution_match === 'exact') {
    return [ok('sampling', `distribution_match exact: vLLM samples the model's whole distribution at temperature ${s.temperature}, the one the trainer scores${forced}; ${prompts}`)];
  }
  const narrowed = [s.top_p < 1 ? `sampling.top_p = ${s.top_p}` : '', (s.top_k ?? 0) > 0 ? `sampling.top_k = ${s.top_k}` : ''].filter(Boolean).join(' and ');
  return [warn('sampling', `distribution_match truncated: ${narrowed} narrow what vLLM samples from, and the trainer scores the whole ` +
    'distribution, so its ratios are biased low on sampled tokens (the mismatch metrics show how much). ' +
    `Fix: sampling.top_p = 1 and sampling.top_k = 0 for an exact match${forced}; ${prompts}`)];
}
