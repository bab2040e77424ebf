/**
 * `ratchet check` on full fine-tuning (issue 41): the full seeds pass (weight sync reloads full weights),
 * what cannot sync that way is refused with its fix (in-run eval sweeps), and with the stack up every
 * replica must have the weights route (a fake fetch stands in for vLLM).
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { parseRunConfig } from '../../../src/config/load';
import { checkFullWeightsRoute, checkWeightSync } from '../../../src/check/weightSync';

const seed = (file: string, edit: (t: string) => string = (t) => t) => {
  const p = path.join(__dirname, '..', '..', '..', 'configs', 'gpu', file);
  return parseRunConfig(edit(readFileSync(p, 'utf8')), p);
};

describe('checkWeightSync', () => {
  test.each(['qwen3-4b-4gpu.toml', 'qwen3-8b-4gpu.toml'])('%s (full): passes, saying how its weights reach vLLM', (file) => {
    const lines = checkWeightSync(seed(file));
    expect(lines.map((l) => [l.section, l.level])).toEqual([['config', 'ok']]);
    expect(lines[0]!.message).toMatch(/trainer\.mode = "full": each weight sync reloads every replica's weights in place/);
  });

  test('a LoRA config has nothing to say', () => {
    expect(checkWeightSync(seed('qwen3-8b-lora-1gpu.toml'))).toEqual([]);
  });

  test('a full run with in-run eval sweeps is refused: a sweep would load the checkpoint as an adapter', () => {
    const lines = checkWeightSync(seed('qwen3-4b-4gpu.toml', (t) => `${t}\n[eval]\nevery_steps = 5\n`));
    expect(lines.map((l) => [l.section, l.level])).toEqual([['config', 'fail']]);
    expect(lines[0]!.message).toMatch(/^eval\.every_steps = 5: in-run eval sweeps .* LoRA adapter.*Fix: set eval\.every_steps = 0/);
  });
});

describe('checkFullWeightsRoute', () => {
  const fetchAnswering = (status: Record<string, number | Error>) => (async (url: string) => {
    const s = status[new URL(url).port]!;
    if (s instanceof Error) throw s;
    return new Response('{}', { status: s });
  }) as typeof fetch;

  test('each replica is asked for /v1/ratchet/weights; one without the route fails with the restart that adds it', async () => {
    const config = seed('qwen3-4b-4gpu.toml');
    const lines = await checkFullWeightsRoute(config, fetchAnswering({ 8000: 200, 8001: 404, 8002: 200, 8003: new TypeError('fetch failed') }));
    expect(lines.map((l) => l.level)).toEqual(['ok', 'fail', 'ok', 'fail']);
    expect(lines[1]!.message).toMatch(/^inference\.base_urls\[1\] http:\/\/127\.0\.0\.1:8001\/v1 has no \/ratchet\/weights route \(HTTP 404\).*WeightSyncRefused.*Fix: on the CPU stack, RATCHET_VLLM_FULL_WEIGHTS=1 bash infra\/inference\.sh restart/);
    expect(lines[3]!.message).toMatch(/inference\.base_urls\[3\].*could not ask it.*fetch failed.*Fix: ratchet up/);
  });

  test('a LoRA run asks nothing', async () => {
    const fetchFn = jest.fn();
    expect(await checkFullWeightsRoute(seed('qwen3-8b-lora-1gpu.toml'), fetchFn as unknown as typeof fetch)).toEqual([]);
    expect(fetchFn).not.toHaveBeenCalled();
  });
});
