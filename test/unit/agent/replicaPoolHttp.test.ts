/**
 * The replica pool over real HTTP with the real client (OpenAIModelClient over the openai package):
 * two small OpenAI-compatible servers on local ports stand in for vLLM replicas, so the errors the
 * pool sees are the client's own (a killed server's reset and refused connections, a 500), not
 * constructed ones. The real-vLLM version is test/integration/replicas.test.ts.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { OpenAIModelClient } from '../../../src/agent/model';
import { ReplicaPool } from '../../../src/agent/replicaPool';

const MODEL = 'run-a/policy-v1';

/**
 * A tiny vLLM stand-in: /v1/models lists MODEL; /tokenize renders any prompt as [1, 2]; each
 * completion answers one token id (base + n). `status` fails the completions (the engine), not
 * /tokenize (vLLM's API server tokenizes without the engine).
 */
async function replica(base: number, opts: { status?: number } = {}) {
  let n = 0;
  const server = http.createServer((req, res) => {
    if (req.url === '/v1/models') {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({ object: 'list', data: [{ id: MODEL, object: 'model', root: '/a/checkpoints/step-0-0123456789abcdef/adapter' }] }));
      return;
    }
    req.resume();
    req.on('end', () => {
      res.setHeader('content-type', 'application/json');
      if (req.url === '/tokenize') {
        res.end(JSON.stringify({ count: 2, max_model_len: 4096, tokens: [1, 2] }));
        return;
      }
      if (req.url !== '/v1/completions') {
        res.statusCode = 404;
        res.end(JSON.stringify({ error: { message: `not served: ${req.url}` } }));
        return;
      }
      if (opts.status) {
        res.statusCode = opts.status;
        res.end(JSON.stringify({ error: { message: 'engine dead' } }));
        return;
      }
      n++;
      res.end(JSON.stringify({
        id: `c${n}`, object: 'text_completion', created: 0, model: MODEL,
        choices: [{ index: 0, text: 'x', finish_reason: 'length', token_ids: [base + n], prompt_token_ids: [1, 2], logprobs: { token_logprobs: [-0.1], tokens: ['x'] } }],
        usage: { prompt_tokens: 2, completion_tokens: 1, total_tokens: 3 },
      }));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1`;
  return {
    url,
    served: () => n,
    kill: () => new Promise<void>((r) => { server.close(() => r()); server.closeAllConnections(); }),
  };
}

const req = { model: MODEL, messages: [{ role: 'user' as const, content: 'u' }], tools: [], sampling: { temperature: 1, top_p: 1, max_tokens: 4 } };
const clientFor = (url: string) => new OpenAIModelClient(url, { timeoutMs: 5_000 });

jest.setTimeout(30_000);

test('a killed replica (connection refused from then on): the next turn goes to the live one, with its own token ids', async () => {
  const a = await replica(1000);
  const b = await replica(2000);
  try {
    const pool = new ReplicaPool({ replicas: [a.url, b.url], preferred: a.url, clientFor });
    const first = await pool.complete(req);
    expect(first).toMatchObject({ replica: a.url, completion_token_ids: [1001] });
    await a.kill();
    const second = await pool.complete(req);
    expect(second).toMatchObject({ replica: b.url, completion_token_ids: [2001] });
    expect(pool.used).toEqual([a.url, b.url]);
  } finally {
    await b.kill();
  }
});

test('a replica answering 500: the turn is sampled on the other', async () => {
  const a = await replica(1000, { status: 500 });
  const b = await replica(2000);
  try {
    const pool = new ReplicaPool({ replicas: [a.url, b.url], preferred: a.url, clientFor });
    expect(await pool.complete(req)).toMatchObject({ replica: b.url, completion_token_ids: [2001] });
  } finally {
    await a.kill();
    await b.kill();
  }
});
