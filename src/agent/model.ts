import OpenAI from 'openai';
import type { ChatMessage, ToolCall, ToolSpec } from '../contracts/trajectory';

/** Sampling for one model turn. */
export interface TurnSampling {
  temperature: number;
  top_p: number;
  /** 0 = off. Sent on every request, so the model's generation config cannot set its own. */
  top_k?: number;
  max_tokens: number;
  seed?: number;
  /** Default `auto`; `required` makes the server constrain the turn to a tool call. */
  tool_choice?: 'auto' | 'required';
}

export interface CompletionRequest {
  model: string;
  messages: ChatMessage[];
  tools: ToolSpec[];
  sampling: TurnSampling;
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
  /** The inference replica (base URL) that sampled it, where a replica pool chose one (src/inference/pool.ts). */
  replica?: string;
}

/** The prompt no longer fits the server's context window: the episode ends with stop_reason context_length. */
export class ContextLengthError extends Error {
  override readonly name = 'ContextLengthError';
}

/** The policy as the agent loop sees it; the real one is vLLM over the openai package, tests script their own. */
export interface ModelClient {
  complete(req: CompletionRequest): Promise<Completion>;
}

interface VllmChoiceExtras {
  token_ids?: number[] | null;
  prompt_token_ids?: number[] | null;
}
interface VllmResponseExtras {
  prompt_token_ids?: number[] | null;
}

/**
 * vLLM's OpenAI-compatible server. `return_token_ids` makes it return the exact
 * ids it tokenized and sampled, so the trainer never re-tokenizes text.
 */
export class OpenAIModelClient implements ModelClient {
  private readonly client: OpenAI;

  private readonly sendSeed: boolean;

  /**
   * `sendSeed` is off by default: vLLM's CPU build (0.32) kills its engine
   * ("CPU Generator does not use offset") when a seeded request is preempted and
   * resumed, which 16 concurrent rollouts on a small KV cache trigger. Set
   * RATCHET_INFERENCE_SEED=1 on GPU servers for reproducible sampling.
   */
  constructor(baseURL: string, opts: { timeoutMs?: number; client?: OpenAI; sendSeed?: boolean } = {}) {
    this.sendSeed = opts.sendSeed ?? process.env.RATCHET_INFERENCE_SEED === '1';
    this.client = opts.client ?? new OpenAI({ baseURL, apiKey: process.env.RATCHET_INFERENCE_API_KEY ?? 'EMPTY', timeout: opts.timeoutMs ?? 300_000, maxRetries: 2 });
  }

  async complete(req: CompletionRequest): Promise<Completion> {
    const body = {
      model: req.model,
      messages: req.messages.map(toOpenAIMessage),
      ...(req.tools.length > 0 ? { tools: req.tools, tool_choice: req.sampling.tool_choice ?? 'auto', parallel_tool_calls: true } : {}),
      temperature: req.sampling.temperature,
      top_p: req.sampling.top_p,
      // vLLM extensions, always explicit: a model's generation_config.json (Qwen3: top_k 20,
      // min_p 0) would otherwise narrow the sampling distribution behind the run's back.
      // -1 is "off" in every vLLM version (0 is rejected by older ones).
      top_k: (req.sampling.top_k ?? 0) > 0 ? req.sampling.top_k : -1,
      min_p: 0,
      repetition_penalty: 1,
      max_tokens: req.sampling.max_tokens,
      ...(this.sendSeed && req.sampling.seed !== undefined ? { seed: req.sampling.seed } : {}),
      logprobs: true,
      // vLLM extension, passed through in the body by the openai package.
      return_token_ids: true,
    };
    let res: OpenAI.Chat.Completions.ChatCompletion;
    try {
      res = await this.client.chat.completions.create(body as OpenAI.Chat.Completions.ChatCompletionCreateParamsNonStreaming, { signal: req.signal });
    } catch (err) {
      if (err instanceof OpenAI.BadRequestError && /context length|maximum context|too long|max_model_len/i.test(err.message)) {
        throw new ContextLengthError(err.message);
      }
      throw err;
    }
    return parseCompletion(res);
  }
}

export function parseCompletion(res: OpenAI.Chat.Completions.ChatCompletion): Completion {
  const choice = res.choices[0];
  if (!choice) throw new Error('inference server returned no choices');
  const extras = choice as unknown as VllmChoiceExtras;
  const top = res as unknown as VllmResponseExtras;
  const toolCalls: ToolCall[] = (choice.message.tool_calls ?? []).map((tc, i) => ({
    id: tc.id || `call_${i}`,
    type: 'function',
    function: { name: tc.function?.name ?? '', arguments: tc.function?.arguments ?? '' },
  }));
  const logprobs = choice.logprobs?.content?.map((c) => c.logprob) ?? null;
  const logprobTokens = choice.logprobs?.content?.map((c) => c.token) ?? null;
  const completionIds = extras.token_ids ?? null;
  const finish = choice.finish_reason;
  return {
    content: choice.message.content ?? null,
    tool_calls: toolCalls,
    finish_reason: finish === 'stop' || finish === 'length' || finish === 'tool_calls' || finish === 'content_filter' ? finish : 'stop',
    prompt_token_ids: top.prompt_token_ids ?? extras.prompt_token_ids ?? null,
    completion_token_ids: completionIds,
    completion_logprobs: logprobs,
    completion_logprob_tokens: logprobTokens,
    prompt_tokens: res.usage?.prompt_tokens ?? 0,
    completion_tokens: res.usage?.completion_tokens ?? completionIds?.length ?? 0,
  };
}

function toOpenAIMessage(m: ChatMessage): OpenAI.Chat.Completions.ChatCompletionMessageParam {
  switch (m.role) {
    case 'system':
      return { role: 'system', content: m.content ?? '' };
    case 'user':
      return { role: 'user', content: m.content ?? '' };
    case 'tool':
      return { role: 'tool', content: m.content ?? '', tool_call_id: m.tool_call_id ?? '' };
    case 'assistant':
      return {
        role: 'assistant',
        content: m.content ?? '',
        ...(m.tool_calls && m.tool_calls.length > 0 ? { tool_calls: m.tool_calls.map((tc) => ({ id: tc.id, type: 'function' as const, function: tc.function })) } : {}),
      };
  }
}
