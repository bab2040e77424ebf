/**
 * The token-capturing model endpoint: one per rollout, an OpenAI
 * chat-completions server (tools included) in front of the run's inference
 * server. An external harness (Nano, mini-swe-agent, yours) talks to it as to
 * any OpenAI-compatible API; it samples each request from vLLM with the run's
 * sampling, token in and token out (src/agent/model.ts: a request that keeps the
 * last conversation extends the last prompt's ids), records the ids and logprobs
 * as a turn (recorder.ts), and answers the harness with a chat completion built
 * from them (with vLLM's `token_ids` / `prompt_token_ids` extensions).
 *
 * - Authenticated: a random 256-bit key made here, given only to this rollout's harness.
 * - Bounded by the rollout's limits: requests (max_turns), completion tokens
 *   (max_tokens: each request's max_tokens is cut to what is left), tool calls
 *   (max_tool_calls), one request in flight, and a flood cap on refused requests.
 *   Hitting a bound answers the harness with an error and fires `stopped`, which
 *   the harness runner turns into the episode's stop reason.
 * - Gone when the rollout ends: `close()` drops every connection and the socket file.
 *
 * The run owns the sampling distribution: temperature, top_p, top_k, min_p and
 * the model (the policy's adapter) are the run's, whatever the harness sends, so
 * the recorded logprobs are the ones the trainer's importance ratio assumes.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { performance } from 'node:perf_hooks';
import OpenAI from 'openai';
import { ContextLengthError, OpenAIModelClient, type Completion, type ModelClient, type TurnSampling } from '../agent/model';
import type { ChatMessage, StopReason, ToolSpec } from '../contracts/trajectory';
import type { TokenContext } from '../inference/chatTokens';
import type { Logger } from '../shared/logger';
import { recordTurn, toChatMessage, toToolSpecs, type RecordedTurn } from './recorder';

export interface EndpointLimits {
  /** Model requests in the episode. */
  max_turns: number;
  /** Completion tokens over the episode. */
  max_tokens: number;
  max_tool_calls: number;
  /** Requests refused (over a limit, or while one is in flight) before the harness counts as flooding. */
  max_refused?: number;
  /** Largest request body, bytes. */
  max_body_bytes?: number;
}

/** Extra authenticated routes under /ratchet/ (the sandbox bridge): JSON in, JSON out. */
export type RouteHandler = (body: unknown, signal: AbortSignal) => Promise<unknown>;

export interface EndpointOptions {
  /** The inference server's OpenAI base URL, e.g. http://127.0.0.1:8000/v1. */
  upstream: string;
  upstreamKey?: string;
  /** The name vLLM serves the policy under (the adapter of `policyVersion`). */
  modelName: string;
  policyVersion: number;
  sampling: TurnSampling;
  limits: EndpointLimits;
  /** Listen on this unix socket (a per-rollout directory); default: 127.0.0.1, a free port. */
  socketPath?: string;
  routes?: Record<string, RouteHandler>;
  upstreamTimeoutMs?: number;
  /** The policy client; default: vLLM at `upstream`, token in and token out. Tests script their own. */
  model?: ModelClient;
  /** Called after each recorded turn: the liveness watchdog's clock. */
  onTurn?: () => void;
  log?: Logger;
}

/** Why the endpoint stopped serving: the harness runner ends the episode with it. */
export interface EndpointStop {
  reason: StopReason;
  message: string;
  /** The inference server failed, not the harness: the rollout is retried, never scored. */
  infra?: boolean;
}

export interface Endpoint {
  /** Base URL as the harness uses it (http://127.0.0.1:PORT/v1, or http://localhost/v1 over the socket). */
  url: string;
  socketPath?: string;
  key: string;
  turns: RecordedTurn[];
  /** The tool specs of the harness's last request. */
  tools(): ToolSpec[];
  /** Resolves when a bound was hit or the upstream failed; never rejects. */
  stopped: Promise<EndpointStop>;
  stopInfo(): EndpointStop | undefined;
  requests(): number;
  close(): Promise<void>;
}

const DEFAULT_MAX_REFUSED = 32;
const DEFAULT_MAX_BODY = 16 * 1024 * 1024;

class HttpError extends Error {
  constructor(readonly status: number, message: string, readonly type = 'invalid_request_error') {
    super(message);
  }
}

export async function startEndpoint(opts: EndpointOptions): Promise<Endpoint> {
  const key = randomBytes(32).toString('hex');
  const keyBuf = Buffer.from(key);
  const turns: RecordedTurn[] = [];
  let tools: ToolSpec[] = [];
  let completionTokens = 0;
  let toolCalls = 0;
  let requests = 0;
  let refused = 0;
  let inFlight = false;
  let closed = false;
  let stop: EndpointStop | undefined;
  let resolveStop!: (s: EndpointStop) => void;
  const stopped = new Promise<EndpointStop>((r) => { resolveStop = r; });
  const abort = new AbortController();
  const maxRefused = opts.limits.max_refused ?? DEFAULT_MAX_REFUSED;
  const maxBody = opts.limits.max_body_bytes ?? DEFAULT_MAX_BODY;
  const upstream = opts.upstream.replace(/\/+$/, '');
  const model = opts.model ?? new OpenAIModelClient(upstream, {
    timeoutMs: opts.upstreamTimeoutMs ?? 300_000, ...(opts.upstreamKey !== undefined ? { apiKey: opts.upstreamKey } : {}),
  });
  // The last request's conversation with its reply, its tools (JSON), and the ids they came to.
  let last: { messages: ChatMessage[]; tools: string; context: TokenContext } | undefined;

  const halt = (s: EndpointStop): void => {
    if (stop) return;
    stop = s;
    opts.log?.info({ reason: s.reason, message: s.message }, 'endpoint stopped serving the harness');
    resolveStop(s);
  };
  const refuse = (status: number, message: string): HttpError => {
    refused += 1;
    if (refused > maxRefused) halt({ reason: 'error', message: `the harness flooded the endpoint: ${refused} requests refused (last: ${message})` });
    return new HttpError(status, message, status === 429 ? 'rate_limit_error' : 'invalid_request_error');
  };

  const authorized = (req: http.IncomingMessage): boolean => {
    const h = req.headers.authorization ?? '';
    const given = Buffer.from(h.startsWith('Bearer ') ? h.slice(7) : String(req.headers['x-api-key'] ?? ''));
    return given.length === keyBuf.length && timingSafeEqual(given, keyBuf);
  };

  async function chat(body: Record<string, unknown>): Promise<OpenAI.Chat.Completions.ChatCompletion> {
    if (stop) throw refuse(400, `this rollout's endpoint no longer serves: ${stop.message}`);
    if (requests >= opts.limits.max_turns) {
      halt({ reason: 'max_turns', message: `the harness sent more than ${opts.limits.max_turns} model requests (max_turns)` });
      throw refuse(400, `model request limit reached (${opts.limits.max_turns})`);
    }
    const remaining = opts.limits.max_tokens - completionTokens;
    if (remaining <= 0) {
      halt({ reason: 'max_tokens', message: `the episode used its ${opts.limits.max_tokens} completion tokens (max_tokens)` });
      throw refuse(400, 'completion token budget of this episode is spent');
    }
    if (!Array.isArray(body.messages) || body.messages.length === 0) throw refuse(400, '`messages` must be a non-empty array');
    const asked = Number(body.max_completion_tokens ?? body.max_tokens ?? Infinity);
    const maxTokens = Math.max(1, Math.min(Number.isFinite(asked) && asked > 0 ? asked : Infinity, opts.sampling.max_tokens, remaining));
    // The prompt renders this request's tools only: a request without them (a summary call) gets none, and no forced call.
    const requestTools = Array.isArray(body.tools) && body.tools.length > 0 ? toToolSpecs(body.tools) : [];
    if (requestTools.length > 0) tools = requestTools;
    const messages = body.messages.map(toChatMessage);
    const stopStrings = typeof body.stop === 'string' ? [body.stop] : Array.isArray(body.stop) ? body.stop.filter((x): x is string => typeof x === 'string') : [];
    // The harness kept the conversation and its tools as they were: this prompt extends the last one's ids.
    const extends_ = last !== undefined && last.tools === JSON.stringify(requestTools) && extendsConversation(messages, last.messages);
    requests += 1;
    const t0 = performance.now();
    let c: Completion;
    try {
      c = await model.complete({
        model: opts.modelName, messages, tools: requestTools,
        sampling: { ...opts.sampling, max_tokens: maxTokens },
        ...(extends_ ? { context: last!.context } : {}),
        ...(stopStrings.length > 0 ? { stop: stopStrings } : {}),
        signal: AbortSignal.any([abort.signal, AbortSignal.timeout(opts.upstreamTimeoutMs ?? 300_000)]),
      });
    } catch (err) {
      if (closed) throw new HttpError(503, 'the rollout ended');
      if (err instanceof ContextLengthError) {
        halt({ reason: 'context_length', message: 'the prompt no longer fits the inference server\'s context window' });
        throw new HttpError(400, `context length exceeded: ${err.message.slice(0, 300)}`);
      }
      if (err instanceof OpenAI.APIError && typeof err.status === 'number' && err.status >= 400 && err.status < 500 && err.status !== 404 && err.status !== 401) {
        // The request itself was bad (a malformed message the harness built): its fault, told to it.
        throw refuse(400, `the inference server refused the request (${err.status}): ${err.message.slice(0, 500)}`);
      }
      halt({ reason: 'error', infra: true, message: `the inference server at ${upstream} failed: ${(err as Error).message.slice(0, 300)}` });
      throw new HttpError(502, 'the inference server failed', 'api_error');
    }
    const rec = recordTurn(messages, c, opts.policyVersion, performance.now() - t0);
    turns.push(rec);
    if (c.prompt_token_ids && c.completion_token_ids) {
      last = { messages: [...messages, rec.reply], tools: JSON.stringify(requestTools), context: { ids: [...c.prompt_token_ids, ...c.completion_token_ids], messageCount: messages.length + 1 } };
    }
    opts.onTurn?.();
    completionTokens += rec.completionTokens;
    toolCalls += rec.reply.tool_calls?.length ?? 0;
    if (toolCalls > opts.limits.max_tool_calls) {
      halt({ reason: 'max_tool_calls', message: `the model asked for more than ${opts.limits.max_tool_calls} tool calls (max_tool_calls)` });
    } else if (completionTokens >= opts.limits.max_tokens) {
      halt({ reason: 'max_tokens', message: `the episode used its ${opts.limits.max_tokens} completion tokens (max_tokens)` });
    }
    return chatCompletion(c, opts.modelName, requests);
  }

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const url = (req.url ?? '/').split('?')[0]!;
    if (!authorized(req)) throw new HttpError(401, 'missing or wrong API key for this rollout\'s endpoint', 'authentication_error');
    if (req.method === 'GET' && url === '/v1/models') {
      send(res, 200, JSON.stringify({ object: 'list', data: [{ id: opts.modelName, object: 'model', owned_by: 'ratchet' }] }));
      return;
    }
    if (req.method !== 'POST') throw new HttpError(405, `${req.method} ${url} is not served`);
    const body = await readJson(req, maxBody);
    if (url === '/v1/chat/completions' || url === '/chat/completions') {
      if (inFlight) throw refuse(429, 'one model request at a time per rollout');
      inFlight = true;
      try {
        const reply = await chat(body);
        if (body.stream === true) sendStream(res, reply);
        else send(res, 200, JSON.stringify(reply));
      } finally {
        inFlight = false;
      }
      return;
    }
    const route = url.startsWith('/ratchet/') ? opts.routes?.[url.slice('/ratchet/'.length)] : undefined;
    if (!route) throw new HttpError(404, `${url} is not served here (this endpoint serves /v1/chat/completions)`);
    send(res, 200, JSON.stringify(await route(body, abort.signal)));
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err: unknown) => {
      const e = err instanceof HttpError ? err : new HttpError(500, (err as Error).message, 'api_error');
      if (!res.headersSent) send(res, e.status, JSON.stringify({ error: { message: e.message, type: e.type, code: e.status } }));
      else res.destroy();
    });
  });
  server.keepAliveTimeout = 60_000;
  if (opts.socketPath) await fs.rm(opts.socketPath, { force: true });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    if (opts.socketPath) server.listen(opts.socketPath, resolve);
    else server.listen(0, '127.0.0.1', resolve);
  });
  const addr = server.address();
  const url = opts.socketPath ? 'http://localhost/v1' : `http://127.0.0.1:${(addr as AddressInfo).port}/v1`;

  return {
    url,
    ...(opts.socketPath ? { socketPath: opts.socketPath } : {}),
    key,
    turns,
    tools: () => tools,
    stopped,
    stopInfo: () => stop,
    requests: () => requests,
    async close() {
      if (closed) return;
      closed = true;
      abort.abort();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
      if (opts.socketPath) await fs.rm(opts.socketPath, { force: true });
    },
  };
}

function send(res: http.ServerResponse, status: number, body: string): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

/**
 * Whether a request keeps the last conversation as it was (the reply included) and only adds to it:
 * its prompt then extends the last prompt's ids. Harnesses echo replies back in their own shape,
 * so a reply compares by what the template renders of it: text, and each call's name and arguments.
 */
export function extendsConversation(messages: ChatMessage[], previous: ChatMessage[]): boolean {
  if (messages.length <= previous.length) return false;
  return previous.every((p, i) => {
    const m = messages[i]!;
    const calls = (x: ChatMessage) => JSON.stringify((x.tool_calls ?? []).map((c) => [c.function.name, canonicalJson(c.function.arguments)]));
    return m.role === p.role && (m.content ?? '') === (p.content ?? '') && calls(m) === calls(p) && (m.tool_call_id ?? '') === (p.tool_call_id ?? '');
  });
}

function canonicalJson(text: string): string {
  try {
    return JSON.stringify(JSON.parse(text));
  } catch {
    return text;
  }
}

/** The reply as OpenAI's chat completion, which every harness reads. */
function chatCompletion(c: Completion, model: string, n: number): OpenAI.Chat.Completions.ChatCompletion {
  const reply: OpenAI.Chat.Completions.ChatCompletion & { prompt_token_ids?: number[] | null } = {
    id: `chatcmpl-ratchet-${n}`,
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{
      index: 0,
      message: { role: 'assistant', content: c.content, refusal: null, ...(c.tool_calls.length > 0 ? { tool_calls: c.tool_calls } : {}) },
      finish_reason: c.finish_reason === 'error' ? 'stop' : c.finish_reason,
      logprobs: null,
      // vLLM's extension (return_token_ids), for harnesses that read the ids they were given.
      ...({ token_ids: c.completion_token_ids } as object),
    }],
    usage: { prompt_tokens: c.prompt_tokens, completion_tokens: c.completion_tokens, total_tokens: c.prompt_tokens + c.completion_tokens },
    prompt_token_ids: c.prompt_token_ids,
  };
  return reply;
}

/** A harness that asked for a stream gets the whole reply as one chunk: the recording needs the whole response anyway. */
function sendStream(res: http.ServerResponse, r: OpenAI.Chat.Completions.ChatCompletion): void {
  const choice = r.choices[0]!;
  const toolCalls = choice.message.tool_calls?.map((tc, index) => ({ index, ...tc }));
  const chunk = {
    id: r.id, object: 'chat.completion.chunk', created: r.created, model: r.model,
    choices: [{ index: 0, delta: { role: 'assistant', content: choice.message.content ?? '', ...(toolCalls ? { tool_calls: toolCalls } : {}) }, finish_reason: choice.finish_reason }],
  };
  const usage = { id: r.id, object: 'chat.completion.chunk', created: r.created, model: r.model, choices: [], usage: r.usage };
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.end(`data: ${JSON.stringify(chunk)}\n\ndata: ${JSON.stringify(usage)}\n\ndata: [DONE]\n\n`);
}

async function readJson(req: http.IncomingMessage, max: number): Promise<Record<string, unknown>> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of req) {
    size += (c as Buffer).length;
    if (size > max) throw new HttpError(413, `request body over ${max} bytes`);
    chunks.push(c as Buffer);
  }
  try {
    const v = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
    if (v === null || typeof v !== 'object' || Array.isArray(v)) throw new Error('not an object');
    return v as Record<string, unknown>;
  } catch (err) {
    throw new HttpError(400, `request body is not a JSON object: ${(err as Error).message}`);
  }
}
