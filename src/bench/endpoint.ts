/**
 * `npm run bench:endpoint`: what the token-capturing endpoint (src/endpoint/)
 * adds to each model request, against calling the upstream directly in the same
 * run. Requests alternate direct / through the endpoint, so drift in the
 * upstream's speed hits both alike; the overhead is the median of the paired
 * differences. Two upstreams:
 *  - a local stub that answers at once with a vLLM-shaped response (the
 *    endpoint's own cost: parse, forward, record, answer);
 *  - the real vLLM of the local stack (RATCHET_INFERENCE_URL), when it answers,
 *    with 1-token completions so the model's time is as small as it can be.
 * Writes its section of BENCHMARKS.md.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import { startEndpoint } from '../endpoint/server';
import { logger } from '../shared/logger';
import { machineLine, writeBenchSection } from './benchmarksFile';

const log = logger.child({ component: 'bench-endpoint' });

interface Stats { n: number; directMs: number; endpointMs: number; overheadMs: number; p90OverheadMs: number; medianGapMs: number }

const median = (xs: number[]) => quantile(xs, 0.5);
function quantile(xs: number[], q: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
}

async function stubUpstream(): Promise<{ url: string; close(): Promise<void> }> {
  const body = JSON.stringify({
    id: 'x', object: 'chat.completion', created: 1, model: 'm', prompt_token_ids: Array.from({ length: 600 }, (_, i) => i),
    choices: [{ index: 0, message: { role: 'assistant', content: 'ok', tool_calls: [{ id: 'c', type: 'function', function: { name: 'shell', arguments: '{"cmd":"ls -la"}' } }] },
      finish_reason: 'tool_calls', token_ids: Array.from({ length: 40 }, (_, i) => i),
      logprobs: { content: Array.from({ length: 40 }, (_, i) => ({ token: `t${i}`, logprob: -0.1, bytes: null, top_logprobs: [] })) } }],
    usage: { prompt_tokens: 600, completion_tokens: 40, total_tokens: 640 },
  });
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => { res.writeHead(200, { 'content-type': 'application/json' }); res.end(body); });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`, close: () => new Promise((r) => { server.closeAllConnections(); server.close(() => r()); }) };
}

async function timed(url: string, key: string, body: string): Promise<number> {
  const t = performance.now();
  const res = await fetch(`${url}/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body });
  const text = await res.text();
  if (!res.ok) throw new Error(`${url}: ${res.status} ${text.slice(0, 200)}`);
  return performance.now() - t;
}

async function measure(upstream: string, model: string, n: number): Promise<Stats> {
  const messages = [{ role: 'system', content: 'You are a coding agent.' }, { role: 'user', content: 'List the files. '.repeat(40) }];
  const tools = [{ type: 'function', function: { name: 'shell', description: 'run a command', parameters: { type: 'object', properties: { cmd: { type: 'string' } }, required: ['cmd'] } } }];
  const sampling = { temperature: 1, top_p: 1, top_k: 0, max_tokens: 1 };
  const ep = await startEndpoint({ upstream, modelName: model, policyVersion: 0, sampling, limits: { max_turns: n + 10, max_tokens: 1e9, max_tool_calls: 1e9 } });
  // The direct call sends what the endpoint forwards, so both ask the server for the same work.
  const direct = JSON.stringify({ model, messages, tools, tool_choice: 'auto', temperature: 1, top_p: 1, top_k: -1, min_p: 0, max_tokens: 1, logprobs: true, return_token_ids: true });
  const via = JSON.stringify({ model: 'anything', messages, tools, max_tokens: 1 });
  const d: number[] = [];
  const e: number[] = [];
  try {
    for (let i = 0; i < 5; i++) { await timed(upstream, 'EMPTY', direct); await timed(ep.url, ep.key, via); }
    for (let i = 0; i < n; i++) {
      d.push(await timed(upstream, 'EMPTY', direct));
      e.push(await timed(ep.url, ep.key, via));
    }
  } finally {
    await ep.close();
  }
  const diffs = d.map((x, i) => e[i]! - x);
  return { n, directMs: median(d), endpointMs: median(e), overheadMs: median(diffs), p90OverheadMs: quantile(diffs, 0.9), medianGapMs: median(e) - median(d) };
}

async function vllmModel(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(`${url}/models`, { signal: AbortSignal.timeout(30_000) });
    const j = (await res.json()) as { data?: { id: string }[] };
    return j.data?.[0]?.id;
  } catch {
    return undefined;
  }
}

async function main(): Promise<void> {
  const stub = await stubUpstream();
  const rows: string[] = [];
  const fmt = (label: string, s: Stats) => `| ${label} | ${s.n} | ${s.directMs.toFixed(2)} | ${s.endpointMs.toFixed(2)} | **${s.overheadMs.toFixed(2)}** | ${s.medianGapMs.toFixed(2)} | ${s.p90OverheadMs.toFixed(2)} | ${(s.endpointMs / s.directMs).toFixed(2)} |`;
  try {
    const s = await measure(stub.url, 'stub', 500);
    log.info(s, 'stub upstream');
    rows.push(fmt('stub upstream (answers at once)', s));
  } finally {
    await stub.close();
  }
  const vllm = (process.env.RATCHET_INFERENCE_URL ?? 'http://127.0.0.1:8000/v1').replace(/\/+$/, '');
  const model = await vllmModel(vllm);
  if (model) {
    const s = await measure(vllm, model, 40);
    log.info(s, 'vLLM upstream');
    rows.push(fmt(`vLLM (${model}, 1-token completions)`, s));
  } else {
    rows.push(`| vLLM | skipped: no inference server answered at ${vllm} | | | | | | |`);
  }
  const section = writeBenchSection('endpoint', [
    '## Token-capturing endpoint overhead (`npm run bench:endpoint`)',
    '',
    `Command: \`npm run bench:endpoint\` (${machineLine()}). Each request is sent alternately straight to the upstream`,
    'and through a per-rollout endpoint (src/endpoint/) that forwards it with the run\'s sampling, records ids and',
    'logprobs, and answers; overhead = median of the paired differences (goal: at most 5 ms).',
    '',
    '| upstream | requests | direct median ms | via endpoint median ms | overhead: median of paired differences ms | difference of medians ms | overhead p90 ms | ratio of medians |',
    '| --- | --- | --- | --- | --- | --- | --- | --- |',
    ...rows,
  ]);
  process.stdout.write(`${section}\n`);
}

main().catch((err: unknown) => {
  log.error({ err: (err as Error).message }, 'bench:endpoint failed');
  process.exit(1);
});
