/**
 * Prompts as token ids, rendered by the inference server's own chat template (vLLM's
 * `/tokenize`), so a rollout worker needs no model files.
 *
 * Token in, token out: an episode's first prompt is the template's rendering of its messages;
 * every later prompt is the previous prompt, the ids the policy sampled, and the template's
 * rendering of only the messages that came after (tool results, a user turn). The template
 * never re-renders a turn the policy sampled, so a turn's prompt always extends the last one
 * and an episode trains as one sample (src/samples/assemble.ts), whatever the template does
 * to earlier turns (Qwen3 dropping reasoning, tool-call arguments re-serialized).
 *
 * The new messages are rendered after a fixed stand-in conversation (system, user, assistant),
 * and only the tokens past the stand-in assistant turn's closing are taken: the rendering the
 * template gives messages that follow a closed assistant turn (however the template then
 * renders that turn itself). Between the sampled ids and those tokens goes what the template
 * writes after an assistant turn's text (ChatML: `<|im_end|>` and a newline), without the
 * end-of-turn token when the policy sampled it.
 */
import OpenAI from 'openai';
import type { ChatMessage, ToolSpec } from '../contracts/trajectory';

/** The template cannot append messages after a closed turn without rewriting it: the episode cannot extend its prompt. */
export class TemplateNotAppendableError extends Error {
  override readonly name = 'TemplateNotAppendableError';
}

/** The ids a turn's prompt extends: the last prompt and what the policy sampled, covering `messageCount` messages. */
export interface TokenContext {
  ids: number[];
  messageCount: number;
}

const STAND_IN: ChatMessage[] = [
  { role: 'system', content: 'S' },
  { role: 'user', content: 'U' },
  { role: 'assistant', content: 'A' },
];

interface Bridge {
  /** The stand-in system and user turns and the assistant's generation prompt. */
  open: number[];
  /** What the template writes after an assistant turn's text, end-of-turn token first. */
  close: number[];
}

/** The OpenAI message shape the server's template reads (tool-call arguments as the model wrote them). */
export function toServerMessage(m: ChatMessage): Record<string, unknown> {
  return {
    role: m.role,
    content: m.content ?? '',
    ...(m.tool_calls && m.tool_calls.length > 0 ? { tool_calls: m.tool_calls.map((tc) => ({ id: tc.id, type: 'function', function: tc.function })) } : {}),
    ...(m.tool_call_id !== undefined ? { tool_call_id: m.tool_call_id } : {}),
    ...(m.name !== undefined ? { name: m.name } : {}),
  };
}

export class ChatTokens {
  private readonly bridges = new Map<string, Promise<Bridge>>();
  private readonly texts = new Map<string, Promise<number[]>>();

  /** `client`'s base URL is the server's root (vLLM serves /tokenize beside /v1). */
  constructor(private readonly client: OpenAI, private readonly model: string) {}

  /** The template's rendering of a whole conversation, ready for the assistant to answer. */
  async render(messages: ChatMessage[], tools: ToolSpec[], signal?: AbortSignal): Promise<number[]> {
    return this.tokenizeChat(messages, tools, true, signal);
  }

  /** `context` extended by `newMessages`, ready for the assistant to answer. */
  async extend(context: readonly number[], newMessages: ChatMessage[], tools: ToolSpec[], signal?: AbortSignal): Promise<number[]> {
    const bridge = await this.bridgeFor(tools, signal);
    const rendered = await this.tokenizeChat([...STAND_IN, ...newMessages], tools, true, signal);
    const closed = startsWith(rendered, bridge.open) ? indexOf(rendered, bridge.close, bridge.open.length) : -1;
    if (closed < 0) {
      throw new TemplateNotAppendableError('the chat template renders the turns before an assistant turn differently once messages follow it, ' +
        'so the messages after a sampled turn cannot be told apart. Fix: use a template that renders each message on its own ' +
        '(configs/templates/smollm2-tools.jinja is one), or set sampling.history = "template"');
    }
    const close = context[context.length - 1] === bridge.close[0] ? bridge.close.slice(1) : bridge.close;
    return [...context, ...close, ...rendered.slice(closed + bridge.close.length)];
  }

  /** Plain text as ids, no special tokens added (a forced prefix). Cached. */
  async text(text: string, signal?: AbortSignal): Promise<number[]> {
    let ids = this.texts.get(text);
    if (!ids) {
      ids = this.post({ model: this.model, prompt: text, add_special_tokens: false }, signal);
      this.texts.set(text, ids);
      ids.catch(() => this.texts.delete(text));
    }
    return ids;
  }

  private bridgeFor(tools: ToolSpec[], signal?: AbortSignal): Promise<Bridge> {
    const key = JSON.stringify(tools);
    let b = this.bridges.get(key);
    if (!b) {
      b = this.makeBridge(tools, signal);
      this.bridges.set(key, b);
      b.catch(() => this.bridges.delete(key));
    }
    return b;
  }

  private async makeBridge(tools: ToolSpec[], signal?: AbortSignal): Promise<Bridge> {
    const [open, base, text] = await Promise.all([
      this.tokenizeChat(STAND_IN.slice(0, 2), tools, true, signal),
      this.tokenizeChat(STAND_IN, tools, false, signal),
      this.text(STAND_IN[2]!.content!, signal),
    ]);
    const tail = base.slice(open.length);
    if (!startsWith(base, open) || !startsWith(tail, text) || tail.length === text.length) {
      throw new TemplateNotAppendableError('the chat template does not render an assistant turn as the generation prompt followed by its text ' +
        'and a closing, so sampled ids cannot be spliced into it. Fix: use a ChatML-style template ' +
        '(configs/templates/smollm2-tools.jinja is one), or set sampling.history = "template"');
    }
    return { open, close: tail.slice(text.length) };
  }

  private tokenizeChat(messages: ChatMessage[], tools: ToolSpec[], addGenerationPrompt: boolean, signal?: AbortSignal): Promise<number[]> {
    return this.post({
      model: this.model,
      messages: messages.map(toServerMessage),
      ...(tools.length > 0 ? { tools } : {}),
      add_generation_prompt: addGenerationPrompt,
      // The template writes every special token itself (vLLM does the same for chat requests).
      add_special_tokens: false,
    }, signal);
  }

  private async post(body: Record<string, unknown>, signal?: AbortSignal): Promise<number[]> {
    const res = await this.client.post<Record<string, unknown>, { tokens: number[] }>('/tokenize', { body, ...(signal ? { signal } : {}) });
    if (!Array.isArray(res.tokens)) throw new Error(`the inference server's /tokenize answered without "tokens": ${JSON.stringify(res).slice(0, 200)}`);
    return res.tokens;
  }
}

function indexOf(a: readonly number[], seq: readonly number[], from: number): number {
  for (let i = from; i + seq.length <= a.length; i++) {
    let j = 0;
    while (j < seq.length && a[i + j] === seq[j]) j++;
    if (j === seq.length) return i;
  }
  return -1;
}

function startsWith(a: readonly number[], prefix: readonly number[]): boolean {
  if (prefix.length > a.length) return false;
  for (let i = 0; i < prefix.length; i++) if (a[i] !== prefix[i]) return false;
  return true;
}
