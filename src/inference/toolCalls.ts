/**
 * Tool calls read from the text the policy sampled (pure). Sampling goes through vLLM's
 * completions endpoint with token ids in and out (src/agent/model.ts), so the server's own
 * tool parser never sees the turn: this module is its counterpart, for the hermes format
 * the shipped chat templates teach (configs/templates/smollm2-tools.jinja, Qwen2.5/Qwen3):
 *
 *   optional text<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>
 *
 * It reads every `<tool_call>…</tool_call>` block (an unclosed last one too, as a turn cut at
 * its stop token), as vLLM's `hermes` parser does, and is more lenient than it where the call
 * is plain (readCall). A block with no call in it leaves the whole reply as text, as vLLM does.
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

/**
 * A block's call. The policy is not held to a grammar, so the reading is lenient where the
 * intent is plain, and the agent loop tells the model what was wrong with the call (an unknown
 * tool, arguments that are not JSON), which teaches more than a reply read as prose:
 * - the block is one JSON object with a name: the call;
 * - it starts with such an object and goes on (text after the call): the object;
 * - it starts `{"name": "…", "arguments":` and the rest does not parse: the call, its arguments
 *   the rest of the block as written (the loop answers that they are not valid JSON).
 */
function readCall(body: string): { name: string; arguments: string } | undefined {
  const json = body.trim();
  const whole = callOf(parseJson(json), json);
  if (whole) return whole;
  const end = firstObjectEnd(json);
  if (end > 0) {
    const head = json.slice(0, end);
    const first = callOf(parseJson(head), head);
    if (first) return first;
  }
  const named = /^\{\s*"name"\s*:\s*"([^"\\]+)"\s*,\s*"arguments"\s*:\s*([\s\S]*)$/.exec(json);
  if (named) {
    // The rest is the arguments and the call's closing brace, unless the model left that out.
    const rest = named[2]!.trim();
    return { name: named[1]!, arguments: parseJson(rest) !== undefined ? rest : rest.replace(/\}\s*$/, '').trim() };
  }
  return undefined;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function callOf(value: unknown, json: string): { name: string; arguments: string } | undefined {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return undefined;
  const { name, arguments: args } = value as { name?: unknown; arguments?: unknown };
  if (typeof name !== 'string' || name === '') return undefined;
  return { name, arguments: argumentsText(json, args) };
}

/** Where the object the text starts with ends (one past its closing brace), strings respected; -1 if it does not close. */
function firstObjectEnd(text: string): number {
  if (!text.startsWith('{')) return -1;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '{') depth++;
    else if (c === '}' && --depth === 0) return i + 1;
  }
  return -1;
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
