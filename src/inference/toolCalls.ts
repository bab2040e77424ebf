/**
 * Tool calls read from the text the policy sampled (pure). Sampling goes through vLLM's
 * completions endpoint with token ids in and out (src/agent/model.ts), so the server's own
 * tool parser never sees the turn: this module is its counterpart, for the hermes format
 * the shipped chat templates teach (configs/templates/smollm2-tools.jinja, Qwen2.5/Qwen3):
 *
 *   optional text<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>
 *
 * It reads what vLLM's `hermes` parser reads: every `<tool_call>…</tool_call>` block (an
 * unclosed last one too, as a turn cut at its stop token), each a JSON object with a name.
 * A block that is not such an object leaves the whole reply as text, as vLLM does, so the
 * model reads its malformed call back as prose instead of a call that never ran.
 * The arguments keep the model's own spelling (`argumentsText`), never re-serialized:
 * the history then shows what the policy wrote.
 */
import type { ToolCall } from '../contracts/trajectory';

export const HERMES_OPEN = '<tool_call>';
const HERMES_CLOSE = '</tool_call>';

/** What `tool_choice = "required"` puts at the start of an assistant turn, as prompt: the policy writes the call from there. */
export const HERMES_FORCED_PREFIX = `${HERMES_OPEN}\n`;

export interface ParsedReply {
  /** The text before the first call (the whole text when there is no valid call). */
  content: string;
  tool_calls: ToolCall[];
}

/**
 * `idOf(i)` names the i-th call of the turn: ids are the client's, the model never writes them
 * (the shipped templates do not render them).
 */
export function parseHermesToolCalls(text: string, idOf: (i: number) => string): ParsedReply {
  const start = text.indexOf(HERMES_OPEN);
  if (start < 0) return { content: text, tool_calls: [] };
  const calls: ToolCall[] = [];
  let at = start;
  while (at >= 0) {
    const bodyStart = at + HERMES_OPEN.length;
    const close = text.indexOf(HERMES_CLOSE, bodyStart);
    const body = text.slice(bodyStart, close < 0 ? undefined : close);
    const call = readCall(body);
    if (!call) return { content: text, tool_calls: [] };
    calls.push({ id: idOf(calls.length), type: 'function', function: call });
    if (close < 0) break;
    at = text.indexOf(HERMES_OPEN, close + HERMES_CLOSE.length);
  }
  // The template writes a newline between the text and the first call when the text lacks one.
  return { content: text.slice(0, start), tool_calls: calls };
}

function readCall(body: string): { name: string; arguments: string } | undefined {
  const json = body.trim();
  let value: unknown;
  try {
    value = JSON.parse(json);
  } catch {
    return undefined;
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const { name, arguments: args } = value as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || name === '') return undefined;
  return { name, arguments: argumentsText(json, args) };
}

/**
 * The arguments as the model spelled them: the slice of the call's JSON after `"arguments":`,
 * when the object ends there (the template's own order: name, then arguments); else the parsed
 * value serialized, which is the same object.
 */
function argumentsText(json: string, args: unknown): string {
  if (args === undefined) return '{}';
  if (typeof args === 'string') return args;
  const key = json.search(/"arguments"\s*:/);
  if (key >= 0) {
    const from = json.indexOf(':', key) + 1;
    const slice = json.slice(from, json.lastIndexOf('}')).trim();
    try {
      if (JSON.stringify(JSON.parse(slice)) === JSON.stringify(args)) return slice;
    } catch { /* the arguments were not the last key */ }
  }
  return JSON.stringify(args);
}
