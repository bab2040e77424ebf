import type { Completion } from '../../agent/model';
import type { ToolCall } from '../../contracts/trajectory';

/**
 * JSON as Python's `json.dumps(v, ensure_ascii=False)` writes it: ", " between items, ": " after keys.
 * vLLM's tool parsers (hermes) json.loads the call the model wrote and hand its arguments back in that
 * form, and the chat template renders string arguments verbatim into the next turn's prompt.
 */
export function servedJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(servedJson).join(', ')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.entries(v).filter(([, x]) => x !== undefined).map(([k, x]) => `${JSON.stringify(k)}: ${servedJson(x)}`).join(', ')}}`;
  }
  return JSON.stringify(v);
}

let callSeq = 0;

/**
 * A scripted demonstration's tool call. Its arguments are written the way the server will give them
 * back: a policy fine-tuned on JSON.stringify's compact form writes compact calls, the server
 * re-serializes them, and every tool turn's next prompt then no longer extends what the policy
 * sampled (a template_rewrote_history break), so RL trains each turn as its own sample with the
 * whole prefix again (about twice the trainer's tokens in bench:learn's episodes).
 */
export function scriptedToolCall(name: string, args: Record<string, unknown>): ToolCall {
  return { id: `call_${name}_${++callSeq}`, type: 'function', function: { name, arguments: servedJson(args) } };
}

/** A scripted turn: tool calls, or (none) a final answer in `content`. It carries no token ids: SFT renders it with the model's template. */
export function scriptedReply(toolCalls: ToolCall[], content = ''): Completion {
  return {
    content, tool_calls: toolCalls, finish_reason: toolCalls.length ? 'tool_calls' : 'stop',
    prompt_token_ids: null, completion_token_ids: null, completion_logprobs: null, prompt_tokens: 0, completion_tokens: 0,
  };
}
