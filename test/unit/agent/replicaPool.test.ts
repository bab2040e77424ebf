/**
 * Inference replicas as a pool (src/agent/replicaPool.ts), with fake replicas: a rollout whose replica
 * dies mid-episode goes on on a live one serving the same version; a replica that came back without
 * the version gets no turn until it is synced; the errors that move a rollout, and those that do not.
 *
 * The "the pool over real HTTP with the real client" block:
 * The replica pool over real HTTP with the real client (OpenAIModelClient over the openai package):
 * two small OpenAI-compatible servers on local ports stand in for vLLM replicas, so the errors the
 * pool sees are the client's own (a killed server's reset and refused connections, a 500), not
 * constructed ones. The real-vLLM version is test/integration/replicas.test.ts.
 */
import OpenAI from 'openai';
import { z } from 'zod';
import { runAgent } from '../../../src/agent/loop';
import type { Completion, CompletionRequest, ModelClient } from '../../../src/agent/model';
import { defineTool } from '../../../src/agent/tool';
import { Task } from '../../../src/tasks/schema';
import { NoReplicaServes, ReplicaHealth, ReplicaPool, adapterIdentity, createReplicaPools, isReplicaDown } from '../../../src/agent/replicaPool';
import { Trajectory } from '../../../src/contracts/trajectory';
import { HostDirSandbox, call, makeRepo } from '../../helpers/rolloutFakes';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { OpenAIModelClient } from '../../../src/agent/model';

jest.setTimeout(30_000); // the longest limit of the blocks merged here

const MODEL = 'run-a/policy-v2';
const ROOT = (step: string) => `/artifacts/runs/run-a/checkpoints/${step}/adapter`;

/** A fake vLLM replica: what /v1/models lists (with each adapter's root), and whether it is up. */
class FakeReplica implements ModelClient {
  up = true;
  served = new Map<string, string | undefined>([['smollm2-135m', '/models/smollm2']]);
  turns = 0;
  constructor(readonly url: string, readonly tokenBase: number) {}
  serve(model: string, root: string): this {
    this.served.set(model, root);
    return this;
  }
  async complete(req: CompletionRequest): Promise<Completion> {
    if (!this.up) throw new OpenAI.APIConnectionError({ message: `connect ECONNREFUSED ${this.url}` });
    if (!this.served.has(req.model)) throw new OpenAI.NotFoundError(404, { message: `The model \`${req.model}\` does not exist.` }, undefined, {});
    this.turns++;
    const ids = [this.tokenBase + this.turns];
    // Turn 1: a tool call; turn 2: an answer in prose, so the episode ends.
    const last = req.messages.some((m) => m.role === 'assistant');
    return {
      content: last ? 'done' : null,
      tool_calls: last ? [] : [call('echo', { text: 'hi' })],
      finish_reason: last ? 'stop' : 'tool_calls',
      prompt_token_ids: [1, 2, 3], completion_token_ids: ids, completion_logprobs: [-0.1],
      prompt_tokens: 3, completion_tokens: 1,
    };
  }
  async models(): Promise<Response> {
    if (!this.up) throw new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } as unknown as Error });
    return new Response(JSON.stringify({ data: [...this.served].map(([id, root]) => ({ id, root })) }));
  }
}

function cluster(...replicas: FakeReplica[]) {
  const by = new Map(replicas.map((r) => [r.url, r]));
  const probes: string[] = [];
  const fetchFn = (async (url: string) => {
    const base = url.replace(/\/models$/, '');
    probes.push(base);
    return by.get(base)!.models();
  }) as unknown as typeof fetch;
  const clientFor = (url: string) => by.get(url)!;
  return { fetchFn, clientFor, probes, urls: replicas.map((r) => r.url) };
}

const req = (model = MODEL): CompletionRequest => ({ model, messages: [{ role: 'user', content: 'u' }], tools: [], sampling: { temperature: 1, top_p: 1, max_tokens: 8 } });

const echo = defineTool({
  name: 'echo', description: 'echo', args: z.object({ text: z.string() }),
  async run({ text }) { return { content: text }; },
});
const task = Task.parse({ instance_id: 't1', repo: 'demo', base_commit: 'HEAD', problem_statement: 'bug', patch: '', FAIL_TO_PASS: ['t::a'] });

describe('a rollout moves to a live replica', () => {
  test('its replica dies mid-episode: the episode goes on, at the same turn, on the replica that serves the same version; each turn names its replica', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const c = cluster(r1, r2);
    const pool = new ReplicaPool({ replicas: c.urls, preferred: 'http://r1/v1', clientFor: c.clientFor, fetch: c.fetchFn });
    // r1 samples the first turn, then dies for good.
    const model: ModelClient = { complete: async (r) => { const out = await pool.complete(r); r1.up = false; return out; } };
    const { root, commit } = makeRepo({ 'a.txt': 'x\n' });
    const result = await runAgent({
      model, modelName: MODEL, policyVersion: 2,
      messages: [{ role: 'system', content: 's' }, { role: 'user', content: 'u' }],
      tools: [echo], limits: { max_tokens: 100, max_tool_calls: 10, max_turns: 10 },
      sampling: { temperature: 1, top_p: 1, max_tokens: 8 },
      ctx: { sandbox: new HostDirSandbox(root, commit), task, state: {}, execTimeoutMs: 5000 },
    });
    expect(result.stop_reason).toBe('completed');
    expect(result.turns.map((t) => t.replica)).toEqual(['http://r1/v1', 'http://r2/v1']);
    // Token-in token-out: each turn keeps the ids its own replica sampled.
    expect(result.turns.map((t) => t.completion_token_ids)).toEqual([[1001], [2001]]);
    expect(pool.used).toEqual(['http://r1/v1', 'http://r2/v1']);
    // The record keeps it.
    expect(Trajectory.shape.turns.element.parse(result.turns[1]).replica).toBe('http://r2/v1');
  });

  test('a replica that serves the name from another step attempt (a redone step) is other weights: passed over', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, `/cache/b/runs/run-a/checkpoints/step-1-bbbbbbbbbbbbbbbb/adapter/0123`);
    const c = cluster(r1, r2);
    const pool = new ReplicaPool({ replicas: c.urls, preferred: 'http://r1/v1', clientFor: c.clientFor, fetch: c.fetchFn });
    await pool.complete(req());
    r1.up = false;
    await expect(pool.complete(req())).rejects.toBeInstanceOf(OpenAI.APIConnectionError);
    expect(r2.turns).toBe(0);
  });

  test('every replica down: the rollout fails with the replica\'s own error (retried; StepRollouts waits for inference)', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    r1.up = false;
    r2.up = false;
    const c = cluster(r1, r2);
    const pool = new ReplicaPool({ replicas: c.urls, preferred: 'http://r1/v1', clientFor: c.clientFor, fetch: c.fetchFn });
    await expect(pool.complete(req())).rejects.toThrow(/no inference replica serves run-a\/policy-v2: http:\/\/r1\/v1 down.*http:\/\/r2\/v1 down/);
  });

  test('a worker\'s rollouts share what one learnt: a replica seen down is tried last by the next rollout', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const c = cluster(r1, r2);
    let now = 0;
    const pools = createReplicaPools(c.clientFor, { fetch: c.fetchFn, health: new ReplicaHealth(30_000, () => now) });
    r1.up = false;
    expect((await pools('http://r1/v1', c.urls).complete(req())).replica).toBe('http://r2/v1');
    c.probes.length = 0;
    expect((await pools('http://r1/v1', c.urls).complete(req())).replica).toBe('http://r2/v1');
    expect(c.probes).toEqual(['http://r2/v1']);
    // After the hold, r1 is asked again first (it may be back).
    now = 31_000;
    r1.up = true;
    expect((await pools('http://r1/v1', c.urls).complete(req())).replica).toBe('http://r1/v1');
  });

  test('one replica: no pool, no probe (the client itself)', () => {
    const r1 = new FakeReplica('http://r1/v1', 1000);
    const c = cluster(r1);
    expect(createReplicaPools(c.clientFor, { fetch: c.fetchFn })('http://r1/v1', ['http://r1/v1'])).toBe(r1);
    expect(createReplicaPools(c.clientFor, { fetch: c.fetchFn })('http://r1/v1')).toBe(r1);
  });
});

describe('a replica that comes back is brought to the current version before it gets rollouts', () => {
  test('back but not synced (a restarted vLLM serves no adapter): passed over; once a sync loads the version it gets rollouts again', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000);
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const c = cluster(r1, r2);
    const pools = createReplicaPools(c.clientFor, { fetch: c.fetchFn });
    // r1 restarted after the weight sync of v2 (recorded behind): its rollouts go to r2.
    expect((await pools('http://r1/v1', c.urls).complete(req())).replica).toBe('http://r2/v1');
    expect(r1.turns).toBe(0);
    // The next sync loads v2 into r1: rollouts preferring it use it again.
    r1.serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    expect((await pools('http://r1/v1', c.urls).complete(req())).replica).toBe('http://r1/v1');
  });

  test('mid-episode, a replica that lost the version (404 for the model) is left for one that has it', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const c = cluster(r1, r2);
    const pool = new ReplicaPool({ replicas: c.urls, preferred: 'http://r1/v1', clientFor: c.clientFor, fetch: c.fetchFn });
    expect((await pool.complete(req())).replica).toBe('http://r1/v1');
    r1.served.delete(MODEL);
    expect((await pool.complete(req())).replica).toBe('http://r2/v1');
  });
});

describe('which errors move a rollout', () => {
  test.each([
    ['connection refused', new OpenAI.APIConnectionError({ message: 'Connection error.' }), true],
    ['timeout', new OpenAI.APIConnectionTimeoutError({ message: 'Request timed out.' }), true],
    ['HTTP 500', new OpenAI.InternalServerError(500, { message: 'engine dead' }, undefined, {}), true],
    ['HTTP 503', new OpenAI.InternalServerError(503, { message: 'unavailable' }, undefined, {}), true],
    ['404 model not served', new OpenAI.NotFoundError(404, { message: 'The model `x` does not exist.' }, undefined, {}), true],
    ['fetch failed (another client)', new TypeError('fetch failed', { cause: { code: 'ECONNREFUSED' } as unknown as Error }), true],
    ['400 bad request (fails anywhere)', new OpenAI.BadRequestError(400, { message: 'bad tool schema' }, undefined, {}), false],
    ['aborted by the rollout', new OpenAI.APIUserAbortError(), false],
    ['a plain bug', new Error('x is undefined'), false],
  ])('%s: %s', (_name, err, down) => {
    expect(isReplicaDown(err)).toBe(down);
  });

  test('a request error (400) is not retried on another replica', async () => {
    const r1 = new FakeReplica('http://r1/v1', 1000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    const r2 = new FakeReplica('http://r2/v1', 2000).serve(MODEL, ROOT('step-1-aaaaaaaaaaaaaaaa'));
    r1.complete = async () => { throw new OpenAI.BadRequestError(400, { message: 'bad' }, undefined, {}); };
    const c = cluster(r1, r2);
    const pool = new ReplicaPool({ replicas: c.urls, preferred: 'http://r1/v1', clientFor: c.clientFor, fetch: c.fetchFn });
    await expect(pool.complete(req())).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    expect(r2.turns).toBe(0);
  });

  test('adapter identity: the step directory, in a local path or a host\'s cache', () => {
    expect(adapterIdentity(ROOT('step-3-0123456789abcdef'))).toBe('step-3-0123456789abcdef');
    expect(adapterIdentity('/cache/bucket/p/runs/r/checkpoints/step-3-0123456789abcdef/adapter/feedbeef')).toBe('step-3-0123456789abcdef');
    expect(adapterIdentity('/models/smollm2')).toBeUndefined();
    expect(adapterIdentity(undefined)).toBeUndefined();
  });
});

test('NoReplicaServes names each replica and why', () => {
  expect(new NoReplicaServes('x').name).toBe('NoReplicaServes');
});

describe('the pool over real HTTP with the real client', () => {
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
});
