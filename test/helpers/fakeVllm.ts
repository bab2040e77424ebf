/**
 * A fake vLLM chat-completions server for endpoint tests: answers each request
 * with deterministic prompt ids (one per character of the rendered messages),
 * sampled ids and logprobs, like vLLM with `return_token_ids` and `logprobs`.
 * `reply` scripts each response; `requests` keeps what it was sent.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';

export interface FakeReply {
  content?: string;
  tool_calls?: { id: string; type: 'function'; function: { name: string; arguments: string } }[];
  finish_reason?: string;
  /** Completion ids; default: one per character of the content. */
  ids?: number[];
  status?: number;
  errorText?: string;
  delayMs?: number;
}

export interface FakeVllm {
  url: string;
  requests: Record<string, unknown>[];
  close(): Promise<void>;
}

/** Prompt ids a fake server derives from the messages (stable, so prefix checks are meaningful). */
export function fakePromptIds(messages: { content?: unknown }[]): number[] {
  const text = messages.map((m) => String(m.content ?? '')).join('|');
  return [...text].map((c) => c.charCodeAt(0) % 1000);
}

export async function startFakeVllm(reply: (body: Record<string, unknown>, n: number) => FakeReply): Promise<FakeVllm> {
  const requests: Record<string, unknown>[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>;
      requests.push(body);
      const r = reply(body, requests.length - 1);
      const respond = () => {
        if (r.status && r.status !== 200) {
          res.writeHead(r.status, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: { message: r.errorText ?? 'fake error' } }));
          return;
        }
        const content = r.content ?? '';
        const ids = r.ids ?? [...content].map((c) => 2000 + (c.charCodeAt(0) % 1000));
        const out = {
          id: `chatcmpl-${requests.length}`, object: 'chat.completion', created: 1, model: String(body.model),
          prompt_token_ids: fakePromptIds(body.messages as { content?: unknown }[]),
          choices: [{
            index: 0,
            message: { role: 'assistant', content, ...(r.tool_calls ? { tool_calls: r.tool_calls } : {}) },
            finish_reason: r.finish_reason ?? (r.tool_calls ? 'tool_calls' : 'stop'),
            token_ids: ids,
            logprobs: { content: ids.map((id) => ({ token: `t${id}`, logprob: -id / 10000, bytes: null, top_logprobs: [] })) },
          }],
          usage: { prompt_tokens: 10, completion_tokens: ids.length, total_tokens: 10 + ids.length },
        };
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify(out));
      };
      if (r.delayMs) setTimeout(respond, r.delayMs);
      else respond();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}
