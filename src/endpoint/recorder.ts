/**
 * What the token-capturing endpoint keeps of one rollout (pure, no I/O): every
 * chat request an external harness sent and the completion vLLM sampled for it,
 * token-in token-out, assembled into the same AgentResult the built-in agent
 * loop returns, so recording, scoring and the batch builder need nothing new.
 *
 * A harness owns its conversation: it may rewrite or drop earlier messages. The
 * trajectory's `messages` are the last request's messages plus its reply; each
 * turn keeps the prompt ids the policy saw. A request that extends the last one
 * extends its ids (src/endpoint/server.ts); one that rewrote the history is
 * rendered anew, and the batch builder's prefix check (src/samples/assemble.ts)
 * starts a new sample there.
 */
import type { AgentResult, AgentStats } from '../agent/loop';
import type { Completion } from '../agent/model';
import type { ChatMessage, StopReason, ToolSpec, Turn } from '../contracts/trajectory';

/** One request the harness sent, reduced to what a trajectory keeps. */
export interface RecordedTurn {
  messages: ChatMessage[];
  reply: ChatMessage;
  turn: Turn;
  completionTokens: number;
  promptTokens: number;
}

/** Normalizes an OpenAI request message (content parts, missing fields) to Ratchet's ChatMessage. */
export function toChatMessage(raw: unknown): ChatMessage {
  const m = (raw ?? {}) as Record<string, unknown>;
  const role = m.role === 'system' || m.role === 'user' || m.role === 'assistant' || m.role === 'tool' ? m.role
    : m.role === 'developer' ? 'system' : 'user';
  let content: string | null;
  if (typeof m.content === 'string') content = m.content;
  else if (Array.isArray(m.content)) content = m.content.map((p: unknown) => (p as { text?: unknown })?.text).filter((t): t is string => typeof t === 'string').join('');
  else content = null;
  const out: ChatMessage = { role, content };
  if (Array.isArray(m.tool_calls) && m.tool_calls.length > 0) {
    out.tool_calls = m.tool_calls.map((tc: unknown, i: number) => {
      const c = (tc ?? {}) as { id?: unknown; function?: { name?: unknown; arguments?: unknown } };
      const args = c.function?.arguments;
      return {
        id: typeof c.id === 'string' ? c.id : `call_${i}`,
        type: 'function' as const,
        function: { name: String(c.function?.name ?? ''), arguments: typeof args === 'string' ? args : JSON.stringify(args ?? {}) },
      };
    });
  }
  if (typeof m.tool_call_id === 'string') out.tool_call_id = m.tool_call_id;
  if (typeof m.name === 'string') out.name = m.name;
  return out;
}

/** The tool specs a harness sent (kept for the trajectory; malformed entries dropped). */
export function toToolSpecs(raw: unknown): ToolSpec[] {
  if (!Array.isArray(raw)) return [];
  const out: ToolSpec[] = [];
  for (const t of raw) {
    const f = (t as { function?: { name?: unknown; description?: unknown; parameters?: unknown } })?.function;
    if (!f || typeof f.name !== 'string') continue;
    out.push({ type: 'function', function: { name: f.name, ...(typeof f.description === 'string' ? { description: f.description } : {}),
      parameters: (f.parameters && typeof f.parameters === 'object' ? f.parameters : {}) as Record<string, unknown> } });
  }
  return out;
}

/** One sampled turn: the ids the policy saw and sampled, and their logprobs, unchanged. */
export function recordTurn(messages: ChatMessage[], c: Completion, policyVersion: number, modelMs: number): RecordedTurn {
  const reply: ChatMessage = { role: 'assistant', content: c.content ?? '', ...(c.tool_calls.length > 0 ? { tool_calls: c.tool_calls } : {}) };
  return {
    messages,
    reply,
    completionTokens: c.completion_tokens,
    promptTokens: c.prompt_tokens,
    turn: {
      prompt_message_count: Math.max(1, messages.length),
      prompt_token_ids: c.prompt_token_ids,
      completion_token_ids: c.completion_token_ids,
      completion_logprobs: c.completion_logprobs,
      ...(c.completion_logprob_tokens ? { completion_logprob_tokens: c.completion_logprob_tokens } : {}),
      finish_reason: c.finish_reason,
      policy_version: policyVersion,
      model_ms: modelMs,
      tools_ms: 0,
    },
  };
}

/** Counts of what the harness did through the sandbox bridge (src/harness/bridge.ts). */
export interface CommandLog {
  commands: string[];
  execErrors: number;
  toolsMs: number;
}

/**
 * The episode as the rollout records it. Turn k's tools_ms is the sandbox time
 * the harness spent between request k and k+1, when known; the stop reason and
 * error are decided by the harness runner (src/harness/run.ts).
 */
export function assembleResult(turns: RecordedTurn[], tools: ToolSpec[], cmds: CommandLog, stop: StopReason, error: string | undefined, answer: Record<string, unknown> | undefined): AgentResult & { tools: ToolSpec[] } {
  const last = turns[turns.length - 1];
  const messages: ChatMessage[] = last ? [...last.messages, last.reply] : [];
  const stats: AgentStats = { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: cmds.execErrors, commands: [...cmds.commands], tools_used: {} };
  let modelMs = 0;
  for (const t of turns) {
    stats.prompt_tokens += t.promptTokens;
    stats.completion_tokens += t.completionTokens;
    for (const call of t.reply.tool_calls ?? []) {
      stats.tool_calls += 1;
      stats.tools_used[call.function.name] = (stats.tools_used[call.function.name] ?? 0) + 1;
    }
    modelMs += t.turn.model_ms;
  }
  return {
    messages,
    turns: turns.map((t) => t.turn),
    stop_reason: stop,
    ...(error !== undefined ? { error } : {}),
    answer,
    stats,
    model_ms: modelMs,
    tools_ms: cmds.toolsMs,
    tools,
  };
}
