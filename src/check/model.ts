import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { toolSpec } from '../agent/tool';
import type { RunConfig } from '../config/schema';
import type { Environment } from '../envs/types';
import type { ChatMessage, ToolSpec } from '../contracts/trajectory';
import { loadModelTokenizer, type ModelTokenizer } from '../samples/tokenizer';
import type { Task } from '../tasks/schema';
import { fail, ok, warn, type CheckLine } from './types';

/**
 * A tool episode, rendered turn by turn as a rollout sees it: the prompt (with
 * the generation prompt), the assistant's turn as the template renders a
 * latest turn (what the model was taught to emit), then the next prompt. The
 * template keeps multi-turn prefixes when each next prompt starts with the
 * previous prompt plus that turn. When it does not (Qwen3's drops the empty
 * <think> block of earlier turns, for one), each turn becomes its own training
 * sample (non_prefix_policy "split") or the run fails ("fail").
 */
export function templateKeepsPrefixes(tok: Pick<ModelTokenizer, 'render'>, tools: ToolSpec[]): { ok: boolean; at?: number } {
  const call = (id: string, name: string, args: Record<string, unknown>) => ({ id, type: 'function' as const, function: { name, arguments: JSON.stringify(args) } });
  const toolName = tools[0]?.function.name ?? 'bash';
  const messages: ChatMessage[] = [{ role: 'system', content: 'You are a helpful agent.' }, { role: 'user', content: 'Find the bug.' }];
  const turns: [ChatMessage, ChatMessage | undefined][] = [
    [{ role: 'assistant', content: '', tool_calls: [call('call_0', toolName, { command: 'ls' })] }, { role: 'tool', tool_call_id: 'call_0', name: toolName, content: 'a.py\nb.py' }],
    [{ role: 'assistant', content: 'Looking at a.py.', tool_calls: [call('call_1', toolName, { command: 'cat a.py' })] }, { role: 'tool', tool_call_id: 'call_1', name: toolName, content: 'x = 1' }],
    [{ role: 'assistant', content: 'Done.' }, undefined],
  ];
  for (const [i, [assistant, observation]] of turns.entries()) {
    const prompt = tok.render(messages, tools, true);
    messages.push(assistant);
    const withTurn = tok.render(messages, tools, false);
    if (!withTurn.startsWith(prompt)) return { ok: false, at: i };
    if (!observation) break;
    messages.push(observation);
    if (!tok.render(messages, tools, true).startsWith(withTurn)) return { ok: false, at: i + 1 };
  }
  return { ok: true };
}

function maxPositions(modelDir: string): number | undefined {
  const file = path.join(modelDir, 'config.json');
  if (!existsSync(file)) return undefined;
  try {
    const cfg = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
    const n = cfg.max_position_embeddings ?? (cfg.text_config as Record<string, unknown> | undefined)?.max_position_embeddings;
    return typeof n === 'number' ? n : undefined;
  } catch {
    return undefined;
  }
}

/** The prompt a rollout starts from, as the model sees it. */
export function firstPrompt(env: Environment, task: Task, fewShot: boolean): ChatMessage[] {
  return [{ role: 'system', content: env.systemPrompt }, ...(fewShot ? env.demonstration : []), { role: 'user', content: env.userPrompt(task) }];
}

/** How many tasks per dataset the prompt-length check tokenizes: enough to find the long ones in a real set. */
export const PROMPT_SAMPLE = 2_000;

export function checkModel(c: RunConfig, envs: (Environment | undefined)[], tasksByEnv: (Task[] | undefined)[]): CheckLine[] {
  const lines: CheckLine[] = [];
  let tok: ModelTokenizer;
  try {
    tok = loadModelTokenizer(c.model.path);
  } catch (err) {
    return [fail('model', `model.path: ${(err as Error).message}`)];
  }
  lines.push(ok('model', `${c.model.path}: tokenizer (${tok.tokenizerVocabSize} ids) and chat template (sha256 ${tok.templateSha256.slice(0, 12)})`));

  const maxPos = maxPositions(c.model.path);
  if (maxPos !== undefined && c.orchestrator.seq_len > maxPos) {
    lines.push(fail('model', `orchestrator.seq_len = ${c.orchestrator.seq_len} is longer than the model's context (max_position_embeddings ${maxPos} in ${c.model.path}/config.json). ` +
      `Fix: set orchestrator.seq_len to ${maxPos} or less`));
  }

  const firstEnv = envs.find((e) => e !== undefined);
  try {
    const prefix = templateKeepsPrefixes(tok, firstEnv ? firstEnv.tools.map(toolSpec) : []);
    if (prefix.ok) {
      lines.push(ok('model', 'chat template keeps multi-turn prefixes: each episode trains as one sample'));
    } else if (c.orchestrator.non_prefix_policy === 'fail') {
      lines.push(fail('model', `orchestrator.non_prefix_policy = "fail", but the chat template rewrites earlier turns (turn ${prefix.at}): every multi-turn episode would fail. ` +
        'Fix: set orchestrator.non_prefix_policy = "split", or install a prefix-stable template (configs/templates/smollm2-tools.jinja) as chat_template.jinja'));
    } else {
      lines.push(warn('model', `chat template rewrites earlier turns (turn ${prefix.at}): each turn of an episode becomes its own sample (non_prefix_policy "split"), ` +
        'which costs prompt tokens. A prefix-stable template avoids it (configs/templates/smollm2-tools.jinja)'));
    }
  } catch (err) {
    lines.push(fail('model', `the chat template of ${c.model.path} cannot render a tool episode: ${(err as Error).message}. Fix: install a template that supports tools`));
  }

  // The longest first prompt, plus one turn's completion, must fit in seq_len.
  envs.forEach((env, i) => {
    const tasks = tasksByEnv[i];
    if (!env || !tasks || tasks.length === 0) return;
    const tools = env.tools.map(toolSpec);
    const fewShot = c.env[i]!.args.few_shot;
    let longest = { tokens: 0, id: '' };
    for (const task of tasks.slice(0, PROMPT_SAMPLE)) {
      let n: number;
      try {
        n = tok.encode(tok.render(firstPrompt(env, task, fewShot), tools, true)).length;
      } catch {
        continue; // a prompt that cannot render is reported by the environment check
      }
      if (n > longest.tokens) longest = { tokens: n, id: task.instance_id };
    }
    const need = longest.tokens + c.sampling.max_tokens;
    const sampled = tasks.length > PROMPT_SAMPLE ? ` (first ${PROMPT_SAMPLE} of ${tasks.length} tasks)` : '';
    if (need > c.orchestrator.seq_len) {
      lines.push(fail('model', `orchestrator.seq_len = ${c.orchestrator.seq_len} is shorter than env.${i} ("${env.id}")'s longest prompt, task "${longest.id}": ` +
        `${longest.tokens} tokens + sampling.max_tokens ${c.sampling.max_tokens}${sampled}. Fix: raise orchestrator.seq_len to at least ${need}, or shorten the prompt (few_shot = false, a shorter problem_statement)`));
    } else {
      lines.push(ok('model', `env.${i} ("${env.id}"): longest prompt ${longest.tokens} tokens + ${c.sampling.max_tokens} per turn fits seq_len ${c.orchestrator.seq_len}${sampled}`));
    }
  });
  return lines;
}
