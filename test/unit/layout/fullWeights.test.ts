/**
 * What `ratchet up --config` gives vLLM for full fine-tuning (issue 41): the ratchet_weights hooks by name,
 * with infra/vllm on PYTHONPATH, and no runtime LoRA loading; a LoRA config gets none of that. The names
 * are checked against the module vLLM imports them from.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { parseRunConfig } from '../../../src/config/load';
import { stackLayout } from '../../../src/layout';

const REPO = path.join(__dirname, '..', '..', '..');
const P = { root: '/repo', home: '/state' };
const replicas = (file: string) => {
  const l = stackLayout(parseRunConfig(readFileSync(path.join(REPO, 'configs', 'gpu', file), 'utf8'), file), P);
  if (l.kind !== 'gpu') throw new Error('expected a GPU layout');
  return l.inference;
};
const flag = (args: string[], name: string) => (args.includes(name) ? args[args.indexOf(name) + 1] : undefined);

describe('vLLM flags for full-weight sync', () => {
  test.each(['qwen3-4b-4gpu.toml', 'qwen3-8b-4gpu.toml'])('%s (full): every replica loads the hooks from infra/vllm', (file) => {
    for (const r of replicas(file)) {
      expect(flag(r.args, '--worker-extension-cls')).toBe('ratchet_weights.WeightsWorker');
      expect(flag(r.args, '--middleware')).toBe('ratchet_weights.WeightsRoute');
      expect(r.env.PYTHONPATH).toBe('/repo/infra/vllm');
      expect(r.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBeUndefined();
      expect(r.args).not.toContain('--enable-lora');
    }
  });

  test.each(['qwen3-8b-lora-1gpu.toml', 'qwen3-14b-4gpu.toml'])('%s (LoRA): no hooks, runtime LoRA loading as before', (file) => {
    for (const r of replicas(file)) {
      expect([r.args.includes('--worker-extension-cls'), r.args.includes('--middleware'), r.env.PYTHONPATH]).toEqual([false, false, undefined]);
      expect(r.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING).toBe('True');
    }
  });

  test('the names are the module\'s: a class WeightsWorker and an ASGI class WeightsRoute in infra/vllm/ratchet_weights.py', () => {
    const src = readFileSync(path.join(REPO, 'infra', 'vllm', 'ratchet_weights.py'), 'utf8');
    expect(src).toMatch(/^class WeightsWorker\(/m);
    expect(src).toMatch(/^class WeightsRoute:\n[\s\S]*async def __call__\(self, scope/m);
  });
});
