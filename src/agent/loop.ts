import { performance } from 'node:perf_hooks';
import type { ChatMessage, ResumeRecord, StopReason, ToolCall, Turn } from '../contracts/trajectory';
import type { Logger } from '../shared/logger';
import type { TokenContext } from '../inference/chatTokens';
import { ContextLengthError, type Completion, type ModelClient, type TurnSampling } from './model';
import { toolSpec, type Tool, type ToolContext, type ToolOutcome } from './tool';

/** Episode limits from the env's args (seed 001: max_tokens, max_tool_calls), plus a turn cap. */
export interface AgentLimits {
  /** Completion tokens over the whole episode. */
  max_tokens: number;
  max_tool_calls: number;
  max_turns: number;
}

/** A failure the model caused with a tool call (bad path, patch that does not match): told to the model, never fatal. */
export class ToolError extends Error {
  override readonly name = 'ToolError';
}

export interface HeartbeatInfo {
  turn: number;
  completion_tokens: number;
  tool_calls: number;
}

export interface ProgressEvent {
  event: 'model-response' | 'tool-result';
  turn: number;
  tool?: string;
}

/**
 * A turn an earlier attempt of the episode completed (src/rollouts/journal.ts): the policy's completion,
 * token for token, and the tool messages it got. Also what `onTurn` hands the journal for each new turn.
 */
export interface ReplayTurn {
  completion: Completion;
  toolOutputs: ChatMessage[];
  policyVersion: number;
  modelMs: number;
  toolsMs: number;
}

/** A replayed tool call answered otherwise than when the turn was journaled: the sandbox is not where that attempt's was. */
export class ReplayDivergedError extends Error {
  override readonly name = 'ReplayDivergedError';
  constructor(readonly turn: number, readonly expected: string, readonly actual: string) {
    super(`replaying turn ${turn + 1} gave another tool output than the journal holds`);
  }
}

export interface AgentRunInput {
  model: ModelClient;
  modelName: string;
  policyVersion: number;
  /** System prompt and first user message. */
  messages: ChatMessage[];
  tools: Tool[];
  limits: AgentLimits;
  sampling: TurnSampling;
  ctx: ToolContext;
  heartbeat?: (info: HeartbeatInfo) => void;
  /** Called on every unit of progress (a model response, a tool result): the liveness watchdog's clock. */
  progress?: (event: ProgressEvent) => void;
  signal?: AbortSignal;
  log?: Logger;
  /**
   * Turns to replay before sampling anything: their tool calls run in this sandbox and each output must
   * equal the recorded one (else ReplayDivergedError); the model is not asked for them.
   */
  replay?: ReplayTurn[];
  /** Called with each newly sampled turn once its tool calls ran, before the next turn is sampled: the turn journal. */
  onTurn?: (turn: number, t: ReplayTurn) => Promise<void>;
}

export interface AgentStats {
  prompt_tokens: number;
  completion_tokens: number;
  tool_calls: number;
  tool_errors: number;
  commands: string[];
  tools_used: Record<string, number>;
}

export interface AgentResult {
  messages: ChatMessage[];
  turns: Turn[];
  stop_reason: StopReason;
  error?: string;
  /** What an answer tool returned; undefined when the agent stopped without one. */
  answer?: Record<string, unknown>;
  stats: AgentStats;
  model_ms: number;
  tools_ms: number;
  /** Set by the episode when an earlier attempt had journaled turns. */
  resume?: ResumeRecord;
}

/**
 * The one multi-turn loop every environment shares: sample a turn, run its tool
 * calls (in order) in the sandbox, answer each call, repeat until the agent
 * answers, stops calling tools, or hits a limit. Nothing the model writes can
 * crash it: malformed calls become tool errors the model reads.
 */
export async function runAgent(input: AgentRunInput): Promise<AgentResult> {
  const { limits, ctx } = input;
  const byName = new Map(input.tools.map((t) => [t.name, t]));
  const specs = input.tools.map(toolSpec);
  const messages: ChatMessage[] = [...input.messages];
  const turns: Turn[] = [];
  const stats: AgentStats = { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} };
  let modelMs = 0;
  let toolsMs = 0;
  let answer: Record<string, unknown> | undefined;
  let stop: StopReason | undefined;
  let error: string | undefined;
  // What the next prompt extends: the last prompt and the ids sampled after it (token in, token out).
  let context: TokenContext | undefined;

  while (stop === undefined) {
    input.signal?.throwIfAborted();
    if (turns.length >= limits.max_turns) { stop = 'max_turns'; break; }
    const remaining = limits.max_tokens - stats.completion_tokens;
    if (remaining <= 0) { stop = 'max_tokens'; break; }

    const promptCount = messages.length;
    const replaying = input.replay?.[turns.length];
    const t0 = performance.now();
    let completion: Completion;
    if (replaying) {
      completion = replaying.completion;
    } else try {
      completion = await input.model.complete({
        model: input.modelName,
        messages,
        tools: specs,
        ...(context ? { context } : {}),
        sampling: {
          ...input.sampling,
          max_tokens: Math.min(input.sampling.max_tokens, remaining),
          // One seed per turn: the same seed every turn would replay the same random draws at
          // each turn, correlating the turns of an episode.
          ...(input.sampling.seed !== undefined ? { seed: turnSeed(input.sampling.seed, turns.length) } : {}),
        },
        signal: input.signal,
      });
    } catch (err) {
      if (err instanceof ContextLengthError) { stop = 'context_length'; break; }
      throw err;
    }
    if (!replaying) input.progress?.({ event: 'model-response', turn: turns.length + 1 });
    // A replayed turn keeps the model time it took when it was sampled.
    const turnModelMs = replaying ? replaying.modelMs : performance.now() - t0;
    modelMs += turnModelMs;
    stats.prompt_tokens += completion.prompt_tokens;
    stats.completion_tokens += completion.completion_tokens;

    messages.push({
      role: 'assistant',
      content: completion.content ?? '',
      ...(completion.tool_calls.length > 0 ? { tool_calls: completion.tool_calls } : {}),
    });
    context = completion.prompt_token_ids && completion.completion_token_ids
      ? { ids: [...completion.prompt_token_ids, ...completion.completion_token_ids], messageCount: messages.length }
      : undefined;

    const t1 = performance.now();
    if (completion.tool_calls.length === 0) {
      // A weak model often answers in prose: the episode ends without an answer.
      stop = completion.finish_reason === 'length' && stats.completion_tokens >= limits.max_tokens ? 'max_tokens' : 'completed';
    }
    for (const call of completion.tool_calls) {
      if (stats.tool_calls >= limits.max_tool_calls) { stop = 'max_tool_calls'; break; }
      stats.tool_calls += 1;
      const outcome = await runToolCall(call, byName, ctx, stats);
      input.progress?.({ event: 'tool-result', turn: turns.length + 1, tool: call.function.name });
      if (outcome.fatal !== undefined) { stop = 'error'; error = outcome.fatal; break; }
      messages.push({ role: 'tool', tool_call_id: call.id, name: call.function.name, content: outcome.content });
      if (outcome.answer) { answer = outcome.answer; stop = 'completed'; break; }
    }
    const turnToolsMs = performance.now() - t1;
    toolsMs += turnToolsMs;
    const toolOutputs = messages.slice(promptCount + 1);
    if (replaying) checkReplay(turns.length, replaying.toolOutputs, toolOutputs, stop === 'error' ? error : undefined);

    turns.push({
      prompt_message_count: promptCount,
      prompt_token_ids: completion.prompt_token_ids,
      completion_token_ids: completion.completion_token_ids,
      completion_logprobs: completion.completion_logprobs,
      ...(completion.completion_logprob_tokens ? { completion_logprob_tokens: completion.completion_logprob_tokens } : {}),
      finish_reason: completion.finish_reason,
      policy_version: replaying ? replaying.policyVersion : input.policyVersion,
      ...(completion.replica ? { replica: completion.replica } : {}),
      ...(completion.weights ? { weights: completion.weights } : {}),
      model_ms: turnModelMs,
      tools_ms: replaying ? replaying.toolsMs : turnToolsMs,
    });
    // A turn whose sandbox failed mid-call never got all its outputs: not journaled, so a retry samples it anew.
    if (!replaying && input.onTurn && error === undefined) {
      await input.onTurn(turns.length - 1, { completion, toolOutputs, policyVersion: input.policyVersion, modelMs: turnModelMs, toolsMs: turnToolsMs });
    }
    input.heartbeat?.({ turn: turns.length, completion_tokens: stats.completion_tokens, tool_calls: stats.tool_calls });
    input.log?.debug({ turn: turns.length, tool_calls: completion.tool_calls.length, finish: completion.finish_reason, stop }, 'agent turn');
    if (stop === undefined && stats.completion_tokens >= limits.max_tokens) stop = 'max_tokens';
  }

  return { messages, turns, stop_reason: stop, ...(error !== undefined ? { error } : {}), answer, stats, model_ms: modelMs, tools_ms: toolsMs };
}

/**
 * A replayed turn must leave the conversation exactly where the journaled one did: the same tool
 * messages, content for content. A sandbox failure while replaying is a divergence too (the episode
 * starts over in a fresh sandbox rather than scoring a turn the policy never saw end that way).
 */
function checkReplay(turn: number, recorded: ChatMessage[], replayed: ChatMessage[], fatal: string | undefined): void {
  if (fatal !== undefined) throw new ReplayDivergedError(turn, recorded[replayed.length]?.content ?? '', `the sandbox failed: ${fatal}`);
  const n = Math.max(recorded.length, replayed.length);
  for (let i = 0; i < n; i++) {
    const want = recorded[i];
    const got = replayed[i];
    if (!want || !got || want.content !== got.content || want.tool_call_id !== got.tool_call_id || want.name !== got.name) {
      throw new ReplayDivergedError(turn, want?.content ?? '(no tool output)', got?.content ?? '(no tool output)');
    }
  }
}

interface CallOutcome extends ToolOutcome {
  /** The sandbox itself failed: the episode ends with stop_reason "error". */
  fatal?: string;
}

async function runToolCall(call: ToolCall, tools: Map<string, Tool>, ctx: ToolContext, stats: AgentStats): Promise<CallOutcome> {
  const name = call.function.name;
  const fail = (content: string): CallOutcome => {
    stats.tool_errors += 1;
    return { content: `Error: ${content}`, error: true };
  };
  const tool = tools.get(name);
  if (!tool) return fail(`unknown tool "${name}". Available tools: ${[...tools.keys()].join(', ')}.`);
  stats.tools_used[name] = (stats.tools_used[name] ?? 0) + 1;

  let raw: unknown;
  try {
    raw = call.function.arguments.trim() === '' ? {} : JSON.parse(call.function.arguments);
  } catch (err) {
    return fail(`arguments of ${name} are not valid JSON (${(err as Error).message}). Send a JSON object, e.g. ${exampleArgs(tool)}.`);
  }
  const parsed = tool.args.safeParse(raw);
  if (!parsed.success) {
    const issues = parsed.error.issues.map((i) => `"${i.path.join('.') || '(arguments)'}": ${i.message}`).join('; ');
    return fail(`invalid arguments for ${name}: ${issues}. Expected ${exampleArgs(tool)}.`);
  }
  try {
    const outcome = await tool.run(parsed.data, ctx);
    if (outcome.command) stats.commands.push(programName(outcome.command));
    if (outcome.error) stats.tool_errors += 1;
    return outcome;
  } catch (err) {
    if (err instanceof ToolError) return fail(err.message);
    if ((err as Error).name === 'AbortError') throw err;
    return { content: '', fatal: `tool ${name} failed in the sandbox: ${(err as Error).message}` };
  }
}

function exampleArgs(tool: Tool): string {
  const keys = Object.keys(tool.args.shape as Record<string, unknown>);
  return `{${keys.map((k) => `"${k}": ...`).join(', ')}}`;
}

/**
 * The program a shell command runs, for the report's usage chart: the first word
 * of its first simple command, path stripped. A word ends at a shell operator as
 * well as at whitespace: models often write `pytest;pytest -x` or `cd x&&pytest`
 * without spaces, and ending words at whitespace alone ran those names together
 * into one bar. Leading `VAR=value` assignments and quotes are not the program.
 */
export function programName(command: string): string {
  // Zero-width spaces are not \s, yet render as nothing: a name split by one would read as two run together.
  const words = command.split(/(?:\$\(|[\s\u200b-\u200d\u2060;&|()<>`{}])+/).map((w) => w.replace(/["']/g, ''));
  const word = words.find((w) => w !== '' && !/^[A-Za-z_][A-Za-z0-9_]*=/.test(w)) ?? '';
  return word.split('/').pop() ?? word;
}

/** The seed of turn `turn` of an episode seeded `seed`: the episode's own at turn 0, distinct per turn after. */
export function turnSeed(seed: number, turn: number): number {
  return (((seed + turn * 104_729) % 2_147_483_647) + 2_147_483_647) % 2_147_483_647;
}
