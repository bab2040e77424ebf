import { randomBytes } from 'node:crypto';
import OpenAI from 'openai';
import type { ChatMessage, ToolCall, ToolSpec } from '../contracts/trajectory';
import { ChatTokens, type TokenContext } from '../inference/chatTokens';
import { HERMES_FORCED_PREFIX, parseHermesToolCalls } from '../inference/toolCalls';

/** Sampling for one model turn. */
export interface TurnSampling {
  temperature: number;
  top_p: number;
  /** 0 = off. Sent on every request, so the model's generation config cannot set its own. */
  top_k?: number;
  max_tokens: number;
  seed?: number;
  /**
   * Default `auto`. `required`: every turn starts with the tool-call opening (`<tool_call>` and a
   * newline) as prompt, and the policy writes the call from there; the forced tokens are no
   * decision of the policy and are never trained.
   */
  tool_choice?: 'auto' | 'required';
  /**
   * `tokens` (default): each turn's prompt is the last prompt, the sampled ids and the new
   * messages rendered (src/inference/chatTokens.ts): one sample an episode. `template`: the
   * chat template renders the whole conversation every turn (its own contexts, e.g. Qwen3's
   * dropped reasoning); the batch builder splits where that rewrote a sampled turn.
   */
  history?: 'tokens' | 'template';
}

export interface CompletionRequest {
  model: string;
  messages: ChatMessage[];
  tools: ToolSpec[];
  sampling: TurnSampling;
  /** The ids this turn's prompt extends (history "tokens"); absent on an episode's first turn. */
  context?: TokenContext;
  /** Extra stop strings (a harness's own). */
  stop?: string[];
  signal?: AbortSignal;
}

/** One sampled assistant turn, token-in token-out. */
export interface Completion {
  content: string | null;
  tool_calls: ToolCall[];
  finish_reason: 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'error';
  prompt_token_ids: number[] | null;
  completion_token_ids: number[] | null;
  completion_logprobs: number[] | null;
  /** The server's text of each logprob's token (what allow_retokenize pairs by). */
  completion_logprob_tokens?: string[] | null;
  prompt_tokens: number;
  completion_tokens: number;
  /** The inference replica (base URL) that sampled it, where a replica pool chose one (./replicaPool.ts). */
  replica?: string;
  /** trainer.mode = "full": the weights directory the replica's workers served when it sampled (./servedWeights.ts). */
  weights?: string;
}

/** The prompt no longer fits the server's context window: the episode ends with stop_reason context_length. */
export class ContextLengthError extends Error {
  override readonly name = 'ContextLengthError';
}

/**
 * The inference server stopped answering while a request waited: its health probe got no answer
 * either (a hung host, a black-holed port: packets dropped, no reset). Not the request's fault.
 */
export class InferenceUnavailableError extends Error {
  override readonly name = 'InferenceUnavailableError';
}

/** How a pending request watches its server: a /health probe every `everyMs`, `failures` in a row without an answer end it. */
export interface ServerWatch {
  everyMs: number;
  timeoutMs: number;
  failures: number;
}

/** About 30 s from the server going silent to the request failing: well inside a minute, far above a busy server's /health. */
export const SERVER_WATCH_DEFAULTS: ServerWatch = {
  everyMs: Number(process.env.RATCHET_INFERENCE_PROBE_S ?? 10) * 1000,
  timeoutMs: 5_000,
  failures: 2,
};

/**
 * Runs `fn` (a request to the server) under a signal that aborts once the server's /health has not
 * answered `watch.failures` probes in a row. A long generation on a live server is not cut short
 * (its /health answers); a silent server is noticed in about everyMs x failures + timeoutMs.
 */
export async function whileServerAnswers<T>(
  healthUrl: string, watch: ServerWatch, outer: AbortSignal | undefined, fn: (signal: AbortSignal) => Promise<T>, fetchFn: typeof fetch = fetch,
): Promise<T> {
  const silent = new AbortController();
  const signal = outer ? AbortSignal.any([outer, silent.signal]) : silent.signal;
  let failed = 0;
  let why = '';
  let over = false;
  let timer: NodeJS.Timeout | undefined;
  const probe = async (): Promise<void> => {
    try {
      const res = await fetchFn(healthUrl, { signal: AbortSignal.timeout(watch.timeoutMs) });
      await res.body?.cancel();
      failed = 0; // any answer, even an error status: the server is there and talking
    } catch (err) {
      failed++;
      why = (err as Error).message;
      if (failed >= watch.failures) {
        silent.abort();
        return;
      }
    }
    if (!over) timer = setTimeout(() => void probe(), watch.everyMs);
  };
  timer = setTimeout(() => void probe(), watch.everyMs);
  try {
    return await fn(signal);
  } catch (err) {
    if (silent.signal.aborted && !outer?.aborted) {
      throw new InferenceUnavailableError(`inference server did not answer ${failed} health probes in a row (${healthUrl}: ${why}) while a request waited: ` +
        'it accepts nothing and refuses nothing (a hung host, a black-holed port). Fix: restart vLLM or its host; the step waits for inference (waiting-for-inference)');
    }
    throw err;
  } finally {
    over = true;
    clearTimeout(timer);
  }
}

/** The policy as the agent loop sees it; the real one is vLLM over the openai package, tests script their own. */
export interface ModelClient {
  complete(req: CompletionRequest): Promise<Completion>;
}


/** vLLM's completion choice with `return_token_ids`. */
interface VllmCompletionChoice {
  text: string;
  finish_reason: string | null;
  token_ids?: number[] | null;
  prompt_token_ids?: number[] | null;
  logprobs?: { token_logprobs?: (number | null)[]; tokens?: string[] } | null;
}

/**
 * vLLM, token in and token out: the prompt goes as ids to the completions endpoint and the
 * reply comes back as the ids the server sampled, with their logprobs. The prompt is the chat
 * template's rendering (by the server, src/inference/chatTokens.ts), extended turn by turn;
 * tool calls are read from the sampled text (src/inference/toolCalls.ts). The trainer then
 * scores exactly the ids the policy saw and sampled: nothing is re-rendered or re-tokenized,
 * and no grammar narrows what the policy samples from.
 */
export class OpenAIModelClient implements ModelClient {
  private readonly client: OpenAI;
  private readonly sendSeed: boolean;
  private readonly chats = new Map<string, ChatTokens>();
  private readonly root: OpenAI;

  /**
   * `sendSeed` is off by default: vLLM's CPU build (0.32) kills its engine
   * ("CPU Generator does not use offset") when a seeded request is preempted and
   * resumed, which 16 concurrent rollouts on a small KV cache trigger. Set
   * RATCHET_INFERENCE_SEED=1 on GPU servers for reproducible sampling.
   */
  private readonly healthUrl: string;
  private readonly watch: ServerWatch;
  private readonly fetchFn: typeof fetch;

  constructor(baseURL: string, opts: { timeoutMs?: number; apiKey?: string; client?: OpenAI; root?: OpenAI; sendSeed?: boolean; watch?: Partial<ServerWatch>; fetch?: typeof fetch } = {}) {
    this.sendSeed = opts.sendSeed ?? process.env.RATCHET_INFERENCE_SEED === '1';
    // vLLM serves /health at its root; a request waits only while it answers.
    this.healthUrl = `${baseURL.replace(/\/v1\/?$/, '').replace(/\/$/, '')}/health`;
    this.watch = { ...SERVER_WATCH_DEFAULTS, ...opts.watch };
    this.fetchFn = opts.fetch ?? fetch;
    const clientOpts = { apiKey: opts.apiKey ?? process.env.RATCHET_INFERENCE_API_KEY ?? 'EMPTY', timeout: opts.timeoutMs ?? 300_000, maxRetries: 2 };
    this.client = opts.client ?? new OpenAI({ baseURL, ...clientOpts });
    // vLLM serves /tokenize at its root, beside /v1.
    this.root = opts.root ?? new OpenAI({ baseURL: baseURL.replace(/\/v1\/?$/, ''), ...clientOpts });
  }

  complete(request: CompletionRequest): Promise<Completion> {
    // A signal of this turn's own (each HTTP call adds an abort listener, and an episode's signal lives for
    // every turn), which also aborts when the server goes silent.
    return whileServerAnswers(this.healthUrl, this.watch, request.signal, (signal) => this.completeUnder({ ...request, signal }), this.fetchFn);
  }

  private async completeUnder(req: CompletionRequest): Promise<Completion> {
    const chat = this.chatTokens(req.model);
    const s = req.sampling;
    const forced = s.tool_choice === 'required' && req.tools.length > 0 ? HERMES_FORCED_PREFIX : '';
    const rendered = req.context && (s.history ?? 'tokens') === 'tokens'
      ? await chat.extend(req.context.ids, req.messages.slice(req.context.messageCount), req.tools, req.signal)
      : await chat.render(req.messages, req.tools, req.signal);
    const prompt = forced ? [...rendered, ...await chat.text(forced, req.signal)] : rendered;
    const body = {
      model: req.model,
      prompt,
      temperature: s.temperature,
      top_p: s.top_p,
      // vLLM extensions, always explicit: a model's generation_config.json (Qwen3: top_k 20,
      // min_p 0) would otherwise narrow the sampling distribution behind the run's back.
      // -1 is "off" in every vLLM version (0 is rejected by older ones).
      top_k: (s.top_k ?? 0) > 0 ? s.top_k : -1,
      min_p: 0,
      repetition_penalty: 1,
      max_tokens: s.max_tokens,
      ...(req.stop && req.stop.length > 0 ? { stop: req.stop } : {}),
      ...(this.sendSeed && s.seed !== undefined ? { seed: s.seed } : {}),
      // The sampled token's own logprob (0 asks for no alternatives).
      logprobs: 0,
      // The stop token is part of what the policy sampled: keep its text and id.
      skip_special_tokens: false,
      return_token_ids: true,
    };
    let res: OpenAI.Completions.Completion;
    try {
      res = await this.client.completions.create(body as unknown as OpenAI.Completions.CompletionCreateParamsNonStreaming, { signal: req.signal });
    } catch (err) {
      if (err instanceof OpenAI.BadRequestError && /context length|maximum context|too long|max_model_len/i.test(err.message)) {
        throw new ContextLengthError(err.message);
      }
      throw err;
    }
    return completionFromTokens(res, prompt, forced);
  }

  private chatTokens(model: string): ChatTokens {
    let c = this.chats.get(model);
    if (!c) {
      c = new ChatTokens(this.root, model);
      this.chats.set(model, c);
    }
    return c;
  }
}

/**
 * A completion response as a turn. `forced` is the text the prompt ended with that the reply
 * continues (the tool-call opening): the calls are read from it and the sampled text together.
 */
export function completionFromTokens(res: OpenAI.Completions.Completion, prompt: number[], forced: string): Completion {
  const choice = res.choices[0] as unknown as VllmCompletionChoice | undefined;
  if (!choice) throw new Error('inference server returned no choices');
  const ids = choice.token_ids ?? null;
  const logprobs = choice.logprobs?.token_logprobs ?? null;
  if (logprobs && logprobs.some((l) => typeof l !== 'number')) throw new Error('inference server returned a sampled token without its logprob');
  const tokens = choice.logprobs?.tokens ?? null;
  const text = choice.finish_reason === 'stop' ? stripStopToken(choice.text, tokens) : choice.text;
  const tag = randomBytes(4).toString('hex');
  const parsed = parseHermesToolCalls(forced + text, (i) => `call_${tag}_${i}`);
  const finish = choice.finish_reason === 'length' ? 'length' : parsed.tool_calls.length > 0 ? 'tool_calls' : 'stop';
  return {
    content: parsed.content,
    tool_calls: parsed.tool_calls,
    finish_reason: finish,
    prompt_token_ids: prompt,
    completion_token_ids: ids,
    completion_logprobs: logprobs as number[] | null,
    completion_logprob_tokens: tokens,
    prompt_tokens: res.usage?.prompt_tokens ?? prompt.length,
    completion_tokens: res.usage?.completion_tokens ?? ids?.length ?? 0,
  };
}

/** The reply's text without the special token the policy stopped on (`<|im_end|>`): it is in the ids, not the message. */
function stripStopToken(text: string, tokens: string[] | null): string {
  const last = tokens?.[tokens.length - 1];
  return last !== undefined && /^<\|[^|]+\|>$/.test(last) && text.endsWith(last) ? text.slice(0, -last.length) : text;
}
