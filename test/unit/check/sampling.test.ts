import { RunConfig } from '../../../src/config/schema';
import { checkSampling } from '../../../src/check/sampling';

const base = {
  name: 'x', model: { path: 'm', name: 'm' }, inference: { base_urls: ['http://127.0.0.1:8000/v1'], served_model: 'm' },
  env: [{ id: 'swe-grep', dataset: 'train.jsonl' }],
};

describe('ratchet check: which distribution a config trains under', () => {
  test('full-vocabulary sampling is exact, with either tool_choice; the line says how prompts are made', () => {
    for (const tool_choice of ['auto', 'required'] as const) {
      const [line] = checkSampling(RunConfig.parse({ ...base, sampling: { temperature: 0.7, tool_choice } }));
      expect(line).toMatchObject({ section: 'sampling', level: 'ok' });
      expect(line!.message).toMatch(/^distribution_match exact/);
      expect(line!.message.includes('opening as prompt, never trained')).toBe(tool_choice === 'required');
    }
    const [tmpl] = checkSampling(RunConfig.parse({ ...base, sampling: { history: 'template' } }));
    expect(tmpl!.message).toMatch(/renders every turn's prompt anew/);
  });

  test('top_p or top_k narrowing the distribution is named, with the fix', () => {
    const [line] = checkSampling(RunConfig.parse({ ...base, sampling: { top_p: 0.9, top_k: 20 } }));
    expect(line).toMatchObject({ section: 'sampling', level: 'warn' });
    expect(line!.message).toMatch(/truncated: sampling.top_p = 0.9 and sampling.top_k = 20 .* Fix: sampling.top_p = 1 and sampling.top_k = 0/);
  });
});
