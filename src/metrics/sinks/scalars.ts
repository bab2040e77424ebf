import type { StepRecord } from '../../contracts';

/**
 * A step record as flat scalars, the shape W&B and TensorBoard plot:
 * `reward/mean`, `reward/<component>`, `trainer/<metric>`, `timing/<phase>_s`, ...
 * Only numbers; nested trainer metrics are flattened with "/".
 */
export function stepScalars(r: StepRecord): Record<string, number> {
  const out: Record<string, number> = {
    'reward/mean': r.mean_reward,
    'reward/std': r.reward_std,
    'policy/version': r.policy_version,
    'policy/mean_staleness': r.mean_staleness,
    'rollouts/count': r.rollouts,
    'rollouts/samples': r.samples,
    'rollouts/completion_tokens': r.completion_tokens,
    'rollouts/tool_calls': r.tool_calls,
  };
  if (r.prompt_tokens !== undefined) out['rollouts/prompt_tokens'] = r.prompt_tokens;
  for (const [k, v] of Object.entries(r.reward_components)) out[`reward/${k}`] = v;
  for (const [k, v] of Object.entries(r.dropped)) out[`dropped/${k}`] = v;
  for (const [k, v] of Object.entries(r.stop_reasons)) out[`stop_reason/${k}`] = v;
  for (const [k, v] of Object.entries(r.timing_ms)) out[`timing/${k}_s`] = v / 1000;
  const walk = (prefix: string, o: Record<string, unknown>) => {
    for (const [k, v] of Object.entries(o)) {
      if (typeof v === 'number') out[`${prefix}/${k}`] = v;
      else if (v && typeof v === 'object' && !Array.isArray(v)) walk(`${prefix}/${k}`, v as Record<string, unknown>);
    }
  };
  walk('trainer', r.trainer);
  return out;
}
