import { mkdtempSync } from 'node:fs';
import * as http from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import { assembleResult } from '../../../src/endpoint/recorder';
import { startEndpoint, type Endpoint, type EndpointOptions } from '../../../src/endpoint/server';
import { FAKE_END_OF_TURN, fakeEncode, fakePromptIds, startFakeVllm, type FakeReply, type FakeVllm } from '../../helpers/fakeVllm';

const sampling = { temperature: 0.7, top_p: 1, top_k: 0, max_tokens: 128 };
const limits = { max_turns: 5, max_tokens: 200, max_tool_calls: 5 };

async function post(ep: Pick<Endpoint, 'url' | 'key'>, body: unknown, key = ep.key, route = '/chat/completions'): Promise<{ status: number; json: Record<string, unknown>; text: string }> {
  const res = await fetch(`${ep.url}${route}`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify(body) });
  const text = await res.text();
  let json: Record<string, unknown> = {};
  try { json = JSON.parse(text) as Record<string, unknown>; } catch { /* SSE */ }
  return { status: res.status, json, text };
}

describe('token-capturing endpoint', () => {
  let fake: FakeVllm;
  let script: (body: Record<string, unknown>, n: number) => FakeReply;
  const eps: Endpoint[] = [];
  const start = async (o: Partial<EndpointOptions> = {}) => {
    const ep = await startEndpoint({ upstream: fake.url, modelName: 'policy-v3', policyVersion: 3, sampling, limits, ...o });
    eps.push(ep);
    return ep;
  };
  beforeAll(async () => {
    fake = await startFakeVllm((b, n) => script(b, n));
  });
  afterEach(async () => {
    for (const ep of eps.splice(0)) await ep.close();
    fake.requests.length = 0;
    fake.tokenizeRequests.length = 0;
  });
  afterAll(() => fake.close());

  const shell = [{ type: 'function', function: { name: 'shell', parameters: { type: 'object' } } }];
  const ids = (text: string) => [...text].map((c) => c.codePointAt(0)!);

  test('records the server\'s exact ids and logprobs per request, with the policy version, and answers the harness', async () => {
    script = (_b, n) => (n === 0
      ? { content: 'ls', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'shell', arguments: '{"cmd":"ls"}' } }] }
      : { content: 'done' });
    const ep = await start();
    const m1 = [{ role: 'system', content: 'sys' }, { role: 'user', content: 'fix it' }];
    const r1 = await post(ep, { model: 'whatever', messages: m1, tools: shell, temperature: 1.5, top_p: 0.5, top_k: 3, max_tokens: 1000 });
    expect(r1.status).toBe(200);
    // The harness gets the call read from the sampled text, as OpenAI's chat completion.
    const choice = (r1.json.choices as { message: { content: string; tool_calls: { function: { name: string; arguments: string } }[] }; finish_reason: string }[])[0]!;
    expect(choice).toMatchObject({ finish_reason: 'tool_calls', message: { content: 'ls', tool_calls: [{ function: { name: 'shell', arguments: '{"cmd":"ls"}' } }] } });
    const m2 = [...m1, { role: 'assistant', content: 'ls', tool_calls: [{ id: 'c1', type: 'function', function: { name: 'shell', arguments: '{"cmd":"ls"}' } }] }, { role: 'tool', tool_call_id: 'c1', content: 'a.py' }];
    await post(ep, { model: 'x', messages: m2, tools: shell });
    // The run's sampling and model win over the harness's; the prompt goes as ids, the sampled ids and logprobs are asked for; max_tokens is cut.
    expect(fake.requests[0]).toMatchObject({ model: 'policy-v3', temperature: 0.7, top_p: 1, top_k: -1, min_p: 0, repetition_penalty: 1, logprobs: 0, return_token_ids: true, skip_special_tokens: false, max_tokens: 128 });
    expect(fake.requests[0]).not.toHaveProperty('messages');
    expect(fake.requests[0]).not.toHaveProperty('tool_choice');
    // The first prompt is the template's rendering of the harness's messages and tools (computed here).
    expect(fake.requests[0]!.prompt).toEqual(fakeEncode('<|im_start|>tools\nshell<|im_end|>\n<|im_start|>system\nsys<|im_end|>\n<|im_start|>user\nfix it<|im_end|>\n<|im_start|>assistant\n'));
    expect(ep.turns).toHaveLength(2);
    const t = ep.turns[0]!.turn;
    expect(t.prompt_token_ids).toEqual(fake.requests[0]!.prompt);
    const sampled = [...ids('ls<tool_call>\n{"name": "shell", "arguments": {"cmd":"ls"}}\n</tool_call>'), FAKE_END_OF_TURN];
    expect(t.completion_token_ids).toEqual(sampled);
    expect(t.completion_logprobs).toEqual(sampled.map((id) => -id / 10000));
    expect(t.policy_version).toBe(3);
    expect(t.prompt_message_count).toBe(2);
    expect(ep.turns[1]!.turn.prompt_message_count).toBe(4);
    const result = assembleResult(ep.turns, ep.tools(), { commands: ['ls'], execErrors: 0, toolsMs: 5 }, 'completed', undefined, undefined);
    expect(result.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'tool', 'assistant']);
    expect(result.stats).toMatchObject({ tool_calls: 1, completion_tokens: sampled.length + 'done'.length + 1, tools_used: { shell: 1 }, commands: ['ls'] });
    expect(result.tools.map((x) => x.function.name)).toEqual(['shell']);
  });

  test('a request that keeps the conversation extends the last prompt and sampled ids; one that rewrote it is rendered anew', async () => {
    script = (_b, n) => (n === 0
      ? { content: '', tool_calls: [{ type: 'function', function: { name: 'shell', arguments: '{"cmd":  "ls"}' } }] }
      : { content: 'ok' });
    const ep = await start();
    const m1 = [{ role: 'system', content: 'sys' }, { role: 'user', content: 'fix it' }];
    const r1 = await post(ep, { messages: m1, tools: shell });
    // The harness echoes the reply in its own shape (its arguments re-serialized, its own call id):
    // the template would render that differently from what the policy sampled.
    const echoed = { role: 'assistant', content: '', tool_calls: [{ id: 'mine', type: 'function', function: { name: 'shell', arguments: JSON.stringify({ cmd: 'ls' }) } }] };
    expect((r1.json.choices as { message: unknown }[])[0]!.message).toMatchObject({ tool_calls: [{ function: { arguments: '{"cmd":  "ls"}' } }] });
    const result = { role: 'tool', tool_call_id: 'mine', content: 'a.py' };
    await post(ep, { messages: [...m1, echoed, result], tools: shell });
    const [p1, p2] = [fake.requests[0]!.prompt as number[], fake.requests[1]!.prompt as number[]];
    const c1 = ep.turns[0]!.turn.completion_token_ids!;
    expect(c1[c1.length - 1]).toBe(FAKE_END_OF_TURN);
    // Token in, token out: the last prompt, the sampled ids (the policy's own spelling), then the new message rendered.
    expect(p2).toEqual([...p1, ...c1, ...fakeEncode('\n<|im_start|>tool\na.py<|im_end|>\n<|im_start|>assistant\n')]);
    expect(p2).not.toEqual(fakePromptIds([...m1, echoed, result], shell));
    expect(ep.turns[1]!.turn.prompt_token_ids).toEqual(p2);

    // The harness dropped the tool result and changed its question: a fresh rendering of what it sent.
    const rewritten = [m1[0]!, { role: 'user', content: 'fix it, briefly' }];
    await post(ep, { messages: rewritten, tools: shell });
    expect(fake.requests[2]!.prompt).toEqual(fakePromptIds(rewritten, shell));
    expect(ep.turns[2]!.turn.prompt_token_ids).toEqual(fake.requests[2]!.prompt);

    // The same conversation with the tools dropped: the tools head the rendering, so it is rendered anew.
    const untooled = [...rewritten, { role: 'assistant', content: 'ok' }, { role: 'user', content: 'and now?' }];
    await post(ep, { messages: untooled });
    expect(fake.requests[3]!.prompt).toEqual(fakePromptIds(untooled));
  });

  test('tool_choice "required": the call\'s opening is prompt, not sampled; the call is read from it and the sampled text', async () => {
    script = () => ({ content: '', tool_calls: [{ type: 'function', function: { name: 'shell', arguments: '{"cmd":"ls"}' } }] });
    const ep = await start({ sampling: { ...sampling, tool_choice: 'required' } });
    const m1 = [{ role: 'user', content: 'go' }];
    const r = await post(ep, { messages: m1, tools: shell, tool_choice: 'auto' });
    expect(r.status).toBe(200);
    expect((r.json.choices as { message: unknown }[])[0]!.message).toMatchObject({ tool_calls: [{ function: { name: 'shell', arguments: '{"cmd":"ls"}' } }] });
    expect(fake.requests[0]).not.toHaveProperty('tool_choice');
    expect(fake.requests[0]!.prompt).toEqual([...fakePromptIds(m1, shell), ...ids('<tool_call>\n')]);
    const t = ep.turns[0]!.turn;
    expect(t.prompt_token_ids).toEqual(fake.requests[0]!.prompt);
    expect(t.completion_token_ids).toEqual([...ids('{"name": "shell", "arguments": {"cmd":"ls"}}\n</tool_call>'), FAKE_END_OF_TURN]);
    // A request without tools (a harness's summary call) has no call to force, and no earlier request's tools in its prompt.
    const m2 = [{ role: 'user', content: 'summarise' }];
    await post(ep, { messages: m2 });
    expect(fake.requests[1]!.prompt).toEqual(fakePromptIds(m2));
    expect(ep.tools().map((x) => x.function.name)).toEqual(['shell']);
  });

  test('refuses a wrong or missing key, and another rollout\'s key', async () => {
    script = () => ({ content: 'x' });
    const a = await start();
    const b = await start();
    expect((await post(a, { messages: [{ role: 'user', content: 'hi' }] }, 'nope')).status).toBe(401);
    expect((await post(a, { messages: [{ role: 'user', content: 'hi' }] }, b.key)).status).toBe(401);
    expect(a.key).not.toBe(b.key);
    expect(a.key).toMatch(/^[0-9a-f]{64}$/);
    expect(fake.requests).toHaveLength(0);
    expect(fake.tokenizeRequests).toHaveLength(0);
  });

  test('bounds requests (max_turns), completion tokens and tool calls; stopped names the reason', async () => {
    script = () => ({ content: 'abcdefghij' });
    const ep = await start({ limits: { ...limits, max_turns: 2 } });
    const msg = { messages: [{ role: 'user', content: 'go' }] };
    expect((await post(ep, msg)).status).toBe(200);
    expect((await post(ep, msg)).status).toBe(200);
    expect((await post(ep, msg)).status).toBe(400);
    await expect(ep.stopped).resolves.toMatchObject({ reason: 'max_turns' });
    expect(fake.requests).toHaveLength(2);

    const tok = await start({ limits: { ...limits, max_tokens: 15 } });
    await post(tok, msg);
    await post(tok, msg);
    // The second request may only ask for what is left of the budget (10 characters and the end-of-turn id used).
    expect(fake.requests[3]!.max_tokens).toBe(15 - 11);
    await expect(tok.stopped).resolves.toMatchObject({ reason: 'max_tokens' });

    script = () => ({ content: '', tool_calls: [1, 2, 3].map((i) => ({ id: `c${i}`, type: 'function' as const, function: { name: 'shell', arguments: '{}' } })) });
    const tc = await start({ limits: { ...limits, max_tokens: 1000, max_tool_calls: 2 }, sampling: { ...sampling, max_tokens: 1000 } });
    await post(tc, msg);
    await expect(tc.stopped).resolves.toMatchObject({ reason: 'max_tool_calls' });
  });

  test('a flooding harness (concurrent and refused requests) is stopped as an error', async () => {
    script = () => ({ content: 'ok', delayMs: 50 });
    const ep = await start({ limits: { ...limits, max_turns: 1000, max_tokens: 100000, max_refused: 5 } });
    const msg = { messages: [{ role: 'user', content: 'go' }] };
    const results = await Promise.all(Array.from({ length: 12 }, () => post(ep, msg)));
    expect(results.filter((r) => r.status === 429).length).toBeGreaterThanOrEqual(6);
    await expect(ep.stopped).resolves.toMatchObject({ reason: 'error', message: expect.stringContaining('flooded') });
    expect(fake.requests.length).toBeLessThanOrEqual(2);
  });

  test('an inference server that fails is an infrastructure stop; a context overflow is context_length', async () => {
    script = () => ({ status: 500, errorText: 'engine dead' });
    const ep = await start();
    expect((await post(ep, { messages: [{ role: 'user', content: 'go' }] })).status).toBe(502);
    await expect(ep.stopped).resolves.toMatchObject({ reason: 'error', infra: true });
    script = () => ({ status: 400, errorText: "This model's maximum context length is 2048 tokens" });
    const cl = await start();
    expect((await post(cl, { messages: [{ role: 'user', content: 'go' }] })).status).toBe(400);
    await expect(cl.stopped).resolves.toMatchObject({ reason: 'context_length' });
    const down = await start({ upstream: 'http://127.0.0.1:9/v1' });
    expect((await post(down, { messages: [{ role: 'user', content: 'go' }] })).status).toBe(502);
    await expect(down.stopped).resolves.toMatchObject({ reason: 'error', infra: true });
  });

  test('a streamed request gets the whole reply as one SSE chunk; bad bodies are 400', async () => {
    script = () => ({ content: 'hello' });
    const ep = await start();
    const r = await post(ep, { messages: [{ role: 'user', content: 'go' }], stream: true });
    expect(r.status).toBe(200);
    expect(r.text).toContain('"content":"hello"');
    expect(r.text.trim().endsWith('data: [DONE]')).toBe(true);
    const bad = await fetch(`${ep.url}/chat/completions`, { method: 'POST', headers: { authorization: `Bearer ${ep.key}` }, body: 'not json' });
    expect(bad.status).toBe(400);
    expect((await post(ep, { messages: [] })).status).toBe(400);
  });

  test('serves over a unix socket, and is gone after close', async () => {
    script = () => ({ content: 'sock' });
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ep-'));
    const socketPath = path.join(dir, 'endpoint.sock');
    const ep = await start({ socketPath });
    const body = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }] });
    const status = await new Promise<number>((resolve, reject) => {
      const req = http.request({ socketPath, path: '/v1/chat/completions', method: 'POST', headers: { authorization: `Bearer ${ep.key}`, 'content-type': 'application/json' } }, (res) => { res.resume(); res.on('end', () => resolve(res.statusCode ?? 0)); });
      req.on('error', reject);
      req.end(body);
    });
    expect(status).toBe(200);
    await ep.close();
    const err = await new Promise<Error>((resolve) => {
      const req = http.request({ socketPath, path: '/v1/models', headers: { authorization: `Bearer ${ep.key}` } }, () => resolve(new Error('answered')));
      req.on('error', resolve);
      req.end();
    });
    expect(err.message).toMatch(/ENOENT|ECONNREFUSED/);
  });
});
