/**
 * The inference probe (src/check/logprobsMode.ts): a run whose sampling changes the distribution
 * (T != 1, top-p, top-k) needs the server's processed logprobs; `ratchet check` and openRun ask
 * for a few top-1 tokens and fail on raw ones. Fake server responses throughout.
 */
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { createConfigActivities } from '../../../src/activities/config';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { checkLogprobsMode, type FetchLike, probeLogprobsMode, processedLogprobsReason } from '../../../src/check/logprobsMode';
import { componentLogger } from '../../../src/shared/logger';

/** A server that answers every chat completion with these token logprobs (null: none). */
function server(logprobs: number[] | null, status = 200): { fetch: FetchLike; bodies: Record<string, unknown>[] } {
  const bodies: Record<string, unknown>[] = [];
  const fetch: FetchLike = async (_url, init) => {
    bodies.push(JSON.parse(init.body) as Record<string, unknown>);
    return {
      status,
      json: async () => ({ choices: [{ message: { content: '4 7' }, logprobs: logprobs === null ? null : { content: logprobs.map((logprob, i) => ({ token: String(i), logprob })) } }] }),
    };
  };
  return { fetch, bodies };
}
const RAW = [-0.41, -1.2, -0.05, -2.3];
const PROCESSED = [0, 0, -0.0, 0];

test('the run needs processed logprobs exactly when its sampling changes the distribution', () => {
  expect(processedLogprobsReason({ temperature: 1, top_p: 1, top_k: 0 })).toBeUndefined();
  expect(processedLogprobsReason({ temperature: 0.7, top_p: 1, top_k: 0 })).toBe('sampling.temperature = 0.7');
  expect(processedLogprobsReason({ temperature: 1, top_p: 0.9, top_k: 20 })).toBe('sampling.top_p = 0.9, sampling.top_k = 20');
});

test('the probe asks for top-1 tokens at temperature 1 and tells processed, raw, none and unreachable apart', async () => {
  const p = server(PROCESSED);
  expect(await probeLogprobsMode('http://h:8000/v1/', 'm', { fetch: p.fetch })).toEqual({ kind: 'processed' });
  expect(p.bodies[0]).toMatchObject({ model: 'm', temperature: 1, top_p: 1, top_k: 1, logprobs: true });
  expect(await probeLogprobsMode('http://h:8000/v1', 'm', { fetch: server(RAW).fetch })).toEqual({ kind: 'raw', logprobs: RAW });
  expect((await probeLogprobsMode('http://h:8000/v1', 'm', { fetch: server(null).fetch })).kind).toBe('none');
  expect((await probeLogprobsMode('http://h:8000/v1', 'm', { fetch: server([-1e-5, -2e-4]).fetch })).kind).toBe('inconclusive');
  expect((await probeLogprobsMode('http://h:8000/v1', 'm', { fetch: server(RAW, 500).fetch })).kind).toBe('inconclusive');
  const down: FetchLike = async () => { throw new Error('connect ECONNREFUSED'); };
  expect(await probeLogprobsMode('http://h:8000/v1', 'm', { fetch: down })).toEqual({ kind: 'unreachable', detail: 'connect ECONNREFUSED' });
});

describe('ratchet check', () => {
  const cfg = (temperature: number) => ({ sampling: { temperature, top_p: 1, top_k: 0 }, inference: { base_urls: ['http://a/v1', 'http://b/v1'], served_model: 'm' } });

  test('a server returning raw logprobs fails a run at T != 1, naming the server, the setting and the vLLM flag', async () => {
    const lines = await checkLogprobsMode(cfg(0.7), { fetch: server(RAW).fetch });
    expect(lines).toHaveLength(2);
    expect(lines[0]).toMatchObject({ level: 'fail', message: expect.stringMatching(/inference\.base_urls\[0\] http:\/\/a\/v1 returns raw logprobs .*sampling\.temperature = 0\.7.*--logprobs-mode processed_logprobs/) });
  });

  test('processed logprobs pass; at T = 1 with no truncation nothing is probed', async () => {
    expect((await checkLogprobsMode(cfg(0.7), { fetch: server(PROCESSED).fetch })).map((l) => l.level)).toEqual(['ok', 'ok']);
    const p = server(RAW);
    expect(await checkLogprobsMode(cfg(1), { fetch: p.fetch })).toEqual([]);
    expect(p.bodies).toHaveLength(0);
  });
});

describe('openRun (the start of a run)', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-probe-'));
  const configFile = (sampling: string) => {
    const f = path.join(dir, `c-${Math.random().toString(36).slice(2)}.toml`);
    writeFileSync(f, `[[env]]\nid = "swe-grep"\n[inference]\nbase_urls = ["http://vllm:8000/v1"]\n[sampling]\n${sampling}\n`);
    return f;
  };
  const acts = (fetch: FetchLike) => createConfigActivities({
    store: new LocalArtifactStore(mkdtempSync(path.join(tmpdir(), 'ratchet-art-'))), logger: componentLogger('test'), inferenceFetch: fetch,
  });

  test('fails non-retryably when the server returns raw logprobs and the run samples at T = 0.7', async () => {
    await expect(acts(server(RAW).fetch).openRun({ configPath: configFile('temperature = 0.7'), runId: 'r1' })).rejects.toMatchObject({
      type: 'InferenceLogprobsMode', nonRetryable: true, message: expect.stringMatching(/http:\/\/vllm:8000\/v1 returns raw logprobs/),
    });
  });

  test('opens the run when the server returns processed logprobs, or cannot be reached yet', async () => {
    await expect(acts(server(PROCESSED).fetch).openRun({ configPath: configFile('top_k = 20'), runId: 'r2' })).resolves.toHaveProperty('loaded.runId', 'r2');
    const down: FetchLike = async () => { throw new Error('connect ECONNREFUSED'); };
    await expect(acts(down).openRun({ configPath: configFile('temperature = 0.7'), runId: 'r3' })).resolves.toHaveProperty('loaded.runId', 'r3');
  });
});
