/**
 * A fake vLLM for endpoint and harness tests, token in and token out like the real client
 * (src/agent/model.ts) uses it:
 * - `POST /tokenize` (at the root, beside /v1) renders messages with a small ChatML-like template
 *   of its own (`fakeRender`) and encodes the text one id per character, ChatML's two markers one
 *   id each (`fakeEncode`); a `prompt` string is encoded as is.
 * - `POST /v1/completions` takes the prompt as ids and answers with the scripted reply as the
 *   policy would write it (hermes tool calls, `hermesText`), its ids, the end-of-turn id when it
 *   stops, one logprob a token (-id / 10000) and the prompt ids echoed back; a reply over the
 *   request's max_tokens is cut there (finish "length"), as vLLM does.
 * Anything else (the chat-completions route included) is a 404. `reply` scripts each completion;
 * `requests` keeps the completion bodies, `tokenizeRequests` the /tokenize bodies.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeReply {
  content?: string;
  /** Written in hermes form after the content; an id, if given, is not part of what the model writes. */
  tool_calls?: { id?: string; type: 'function'; function: { name: string; arguments: string } }[];
  /** Default "stop" (the end-of-turn id is sampled last); "length" samples no end-of-turn id. */
  finish_reason?: 'stop' | 'length';
  status?: number;
  errorText?: string;
  delayMs?: number;
}

export interface FakeVllm {
  /** The OpenAI base URL (…/v1), as the run configures it. */
  url: string;
  /** Completion request bodies, in order. */
  requests: Record<string, unknown>[];
  tokenizeRequests: Record<string, unknown>[];
  close(): Promise<void>;
}

const SPECIAL = ['<|im_start|>', '<|im_end|>'];
export const FAKE_END_OF_TURN = 100_001;
/** The opening the client writes as prompt for tool_choice "required"; a reply continues after it. */
const FORCED_OPENING = '<tool_call>\n';

export function fakeEncode(text: string): number[] {
  const ids: number[] = [];
  for (let i = 0; i < text.length;) {
    const sp = SPECIAL.findIndex((t) => text.startsWith(t, i));
    if (sp >= 0) { ids.push(100_000 + sp); i += SPECIAL[sp]!.length; continue; }
    const cp = text.codePointAt(i)!;
    ids.push(cp);
    i += cp > 0xffff ? 2 : 1;
  }
  return ids;
}

export function fakeDecode(ids: number[]): string {
  return ids.map((id) => (id >= 100_000 ? SPECIAL[id - 100_000]! : String.fromCodePoint(id))).join('');
}

interface FakeCall { function: { name: string; arguments: unknown } }

/** An assistant turn's text: its content, then each call as a hermes block (arguments as written). */
export function hermesText(content: string, calls: FakeCall[] = []): string {
  return content + calls.map((c) => {
    const args = typeof c.function.arguments === 'string' ? c.function.arguments : JSON.stringify(c.function.arguments);
    return `<tool_call>\n{"name": ${JSON.stringify(c.function.name)}, "arguments": ${args}}\n</tool_call>`;
  }).join('\n');
}

/** The fake template: tool names first, then `<|im_start|>role\ntext<|im_end|>\n` a message. */
export function fakeRender(
  messages: { role: string; content?: unknown; tool_calls?: FakeCall[] }[],
  tools: { function: { name: string } }[] = [],
  addGenerationPrompt = true,
): string {
  const head = tools.length > 0 ? `<|im_start|>tools\n${tools.map((t) => t.function.name).join(',')}<|im_end|>\n` : '';
  const body = messages.map((m) => `<|im_start|>${m.role}\n${hermesText(String(m.content ?? ''), m.tool_calls)}<|im_end|>\n`).join('');
  return head + body + (addGenerationPrompt ? '<|im_start|>assistant\n' : '');
}

/** The prompt ids the fake's /tokenize gives a conversation, ready for the assistant. */
export function fakePromptIds(messages: Parameters<typeof fakeRender>[0], tools: Parameters<typeof fakeRender>[1] = []): number[] {
  return fakeEncode(fakeRender(messages, tools, true));
}

function endsWith(a: number[], suffix: number[]): boolean {
  return a.length >= suffix.length && suffix.every((x, i) => a[a.length - suffix.length + i] === x);
}

export async function startFakeVllm(reply: (body: Record<string, unknown>, n: number) => FakeReply): Promise<FakeVllm> {
  const requests: Record<string, unknown>[] = [];
  const tokenizeRequests: Record<string, unknown>[] = [];
  const json = (res: http.ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };

  const tokenize = (body: Record<string, unknown>, res: http.ServerResponse) => {
    tokenizeRequests.push(body);
    const text = typeof body.prompt === 'string'
      ? body.prompt
      : fakeRender(body.messages as Parameters<typeof fakeRender>[0], (body.tools ?? []) as Parameters<typeof fakeRender>[1], body.add_generation_prompt === true);
    const tokens = fakeEncode(text);
    json(res, 200, { count: tokens.length, max_model_len: 4096, tokens });
  };

  const complete = (body: Record<string, unknown>, res: http.ServerResponse) => {
    requests.push(body);
    const r = reply(body, requests.length - 1);
    const respond = () => {
      if (r.status && r.status !== 200) {
        json(res, r.status, { error: { message: r.errorText ?? 'fake error', type: 'BadRequestError', code: r.status } });
        return;
      }
      const prompt = body.prompt as number[];
      if (!Array.isArray(prompt) || !prompt.every((x) => Number.isInteger(x))) {
        json(res, 400, { error: { message: 'fake vLLM: prompt must be token ids' } });
        return;
      }
      let text = hermesText(r.content ?? '', r.tool_calls);
      // Prompted with the call's opening, the model writes on from there.
      if (endsWith(prompt, fakeEncode(FORCED_OPENING)) && text.startsWith(FORCED_OPENING)) text = text.slice(FORCED_OPENING.length);
      let finish = r.finish_reason ?? 'stop';
      let ids = [...fakeEncode(text), ...(finish === 'stop' ? [FAKE_END_OF_TURN] : [])];
      const max = Number(body.max_tokens);
      if (Number.isInteger(max) && ids.length > max) {
        ids = ids.slice(0, max);
        finish = 'length';
      }
      const tokens = ids.map((id) => fakeDecode([id]));
      json(res, 200, {
        id: `cmpl-${requests.length}`, object: 'text_completion', created: 1, model: String(body.model),
        choices: [{
          index: 0, text: tokens.join(''), finish_reason: finish, stop_reason: null,
          token_ids: ids, prompt_token_ids: prompt,
          logprobs: { text_offset: [], token_logprobs: ids.map((id) => -id / 10000), tokens, top_logprobs: null },
        }],
        usage: { prompt_tokens: prompt.length, completion_tokens: ids.length, total_tokens: prompt.length + ids.length },
      });
    };
    if (r.delayMs) setTimeout(respond, r.delayMs);
    else respond();
  };

  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const route = `${req.method} ${req.url}`;
      if (route !== 'POST /tokenize' && route !== 'POST /v1/completions') {
        json(res, 404, { error: { message: `fake vLLM serves POST /tokenize and POST /v1/completions, not ${route}` } });
        return;
      }
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      if (route === 'POST /tokenize') tokenize(body, res);
      else complete(body, res);
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    tokenizeRequests,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}
