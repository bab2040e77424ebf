/**
 * Token in, token out (src/agent/model.ts, src/inference/chatTokens.ts, toolCalls.ts) against a
 * scripted server: /tokenize renders the shipped ChatML template and encodes it with a tokenizer
 * of its own (a character a token, ChatML's markers one token each), independent of the code
 * under test. What must hold: a turn's prompt is the last prompt, the sampled ids and exactly
 * the template's rendering of the new messages; calls are read from the sampled text.
 */
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Template } from '@huggingface/jinja';
import { runAgent, type AgentRunInput } from '../../../src/agent/loop';
import { defineTool, toolSpec } from '../../../src/agent/tool';
import type { ChatMessage } from '../../../src/contracts/trajectory';
import { OpenAIModelClient } from '../../../src/agent/model';
import { assembleTrajectory, type TokenizerInfo } from '../../../src/samples/assemble';
import { z } from 'zod';

const template = new Template(readFileSync(path.join(__dirname, '../../../configs/templates/smollm2-tools.jinja'), 'utf8'));
const SPECIAL = ['<|im_start|>', '<|im_end|>'];

function encode(text: string): number[] {
  const ids: number[] = [];
  for (let i = 0; i < text.length;) {
    const sp = SPECIAL.findIndex((t) => text.startsWith(t, i));
    if (sp >= 0) { ids.push(100_000 + sp); i += SPECIAL[sp]!.length; continue; }
    ids.push(text.codePointAt(i)!);
    i += 1;
  }
  return ids;
}
const decode = (ids: number[]) => ids.map((id) => (id >= 100_000 ? SPECIAL[id - 100_000]! : String.fromCodePoint(id))).join('');

/** The server: /tokenize renders and encodes; completions answer with scripted texts (EOS appended when they stop). */
function scriptedServer(replies: { text: string; finish?: 'stop' | 'length' }[], tmpl: Template = template) {
  const prompts: number[][] = [];
  const bodies: Record<string, unknown>[] = [];
  const root = { post: async (_route: string, opts: { body: Record<string, unknown> }) => {
    const b = opts.body;
    if (typeof b.prompt === 'string') return { tokens: encode(b.prompt) };
    const text = tmpl.render({ messages: b.messages, tools: b.tools, add_generation_prompt: b.add_generation_prompt });
    return { tokens: encode(text) };
  } };
  const client = { completions: { create: async (body: Record<string, unknown>) => {
    bodies.push(body);
    prompts.push(body.prompt as number[]);
    const r = replies.shift();
    if (!r) throw new Error('no scripted reply left');
    const ids = [...encode(r.text), ...(r.finish === 'length' ? [] : [100_001])];
    return {
      id: 'x', object: 'text_completion', created: 0, model: 'm',
      usage: { prompt_tokens: (body.prompt as number[]).length, completion_tokens: ids.length, total_tokens: 0 },
      choices: [{ index: 0, text: decode(ids), finish_reason: r.finish ?? 'stop', token_ids: ids,
        logprobs: { token_logprobs: ids.map(() => -0.5), tokens: ids.map((id) => decode([id])) } }],
    };
  } } };
  return { prompts, bodies, model: new OpenAIModelClient('http://127.0.0.1:1/v1', { client: client as never, root: root as never }) };
}

const echo = defineTool({ name: 'echo', description: 'Echo', args: z.object({ text: z.string() }), run: async (a) => ({ content: `echoed ${a.text}` }) });
const answer = defineTool({ name: 'answer', description: 'Answer', args: z.object({ files: z.array(z.string()) }), run: async (a) => ({ content: 'ok', answer: a }) });
const tools = [echo, answer];

function agentInput(model: OpenAIModelClient, over: { tool_choice?: 'auto' | 'required'; history?: 'tokens' | 'template' } = {}) {
  return {
    model, modelName: 'm', policyVersion: 0,
    messages: [{ role: 'system' as const, content: 'You find files.' }, { role: 'user' as const, content: 'Find it.' }],
    tools, limits: { max_tokens: 10_000, max_tool_calls: 8, max_turns: 6 },
    sampling: { temperature: 1, top_p: 1, max_tokens: 256, ...over },
    ctx: undefined as never as AgentRunInput['ctx'],
  };
}

/** The template's rendering of a conversation with the loop's tool specs, computed here. */
const render = (messages: ChatMessage[]) => template.render({
  messages: messages.map((m) => ({ ...m, content: m.content ?? '' })), tools: tools.map(toolSpec), add_generation_prompt: true,
});

describe('token in, token out through the agent loop', () => {
  test('every prompt extends the last prompt + sampled ids by exactly the template\'s rendering of the new messages', async () => {
    // The model writes compact JSON, which a server's parser would re-serialize with other spacing.
    const srv = scriptedServer([
      { text: 'Let me look.\n<tool_call>\n{"name":"echo","arguments":{"text":"a"}}\n</tool_call>' },
      { text: '<tool_call>\n{"name": "echo", "arguments": {"text":  "b"}}\n</tool_call>' },
      { text: '<tool_call>\n{"name": "answer", "arguments": {"files": ["x.py"]}}\n</tool_call>' },
    ]);
    const res = await runAgent(agentInput(srv.model));
    expect(res.stop_reason).toBe('completed');
    expect(res.answer).toEqual({ files: ['x.py'] });
    expect(res.turns).toHaveLength(3);
    // The arguments keep the model's spelling.
    expect(res.messages[2]!.tool_calls![0]!.function.arguments).toBe('{"text":"a"}');
    for (let k = 1; k < res.turns.length; k++) {
      const prev = res.turns[k - 1]!;
      const prefix = [...prev.prompt_token_ids!, ...prev.completion_token_ids!];
      const prompt = res.turns[k]!.prompt_token_ids!;
      expect(prompt.slice(0, prefix.length)).toEqual(prefix);
      // Independently: what the template writes for the tool message after an assistant turn, the EOS already sampled.
      const toolMsgs = res.messages.slice(res.turns[k - 1]!.prompt_message_count + 1, res.turns[k]!.prompt_message_count);
      const expected = '\n' + toolMsgs.map((m) => `<|im_start|>tool\n<tool_response>\n${m.content}\n</tool_response><|im_end|>\n`).join('') + '<|im_start|>assistant\n';
      expect(decode(prompt.slice(prefix.length))).toBe(expected);
    }
    // The first prompt is the template's own rendering.
    expect(decode(res.turns[0]!.prompt_token_ids!)).toBe(render(agentInput(srv.model).messages));
    expect(srv.bodies[0]).toMatchObject({ logprobs: 0, return_token_ids: true, top_k: -1, min_p: 0, repetition_penalty: 1 });
  });

  test('a turn cut at max_tokens gets the template\'s end of turn before the next messages', async () => {
    const srv = scriptedServer([
      { text: '<tool_call>\n{"name": "echo", "arguments": {"text": "a"}}\n</tool_call>\nand more', finish: 'length' },
      { text: 'done' },
    ]);
    const res = await runAgent(agentInput(srv.model));
    const prev = res.turns[0]!;
    const prefix = [...prev.prompt_token_ids!, ...prev.completion_token_ids!];
    expect(decode(res.turns[1]!.prompt_token_ids!.slice(prefix.length)).startsWith('<|im_end|>\n<|im_start|>tool\n')).toBe(true);
  });

  test('tool_choice required puts the call\'s opening in the prompt, untrained, and reads the call across it', async () => {
    const srv = scriptedServer([{ text: '{"name": "answer", "arguments": {"files": []}}\n</tool_call>' }]);
    const res = await runAgent(agentInput(srv.model, { tool_choice: 'required' }));
    expect(decode(res.turns[0]!.prompt_token_ids!).endsWith('<|im_start|>assistant\n<tool_call>\n')).toBe(true);
    expect(decode(res.turns[0]!.completion_token_ids!).startsWith('{"name"')).toBe(true);
    expect(res.answer).toEqual({ files: [] });
  });

  test('history "template" renders the whole conversation every turn', async () => {
    const srv = scriptedServer([
      { text: '<tool_call>\n{"name":"echo","arguments":{"text":"a"}}\n</tool_call>' },
      { text: 'bye' },
    ]);
    const res = await runAgent(agentInput(srv.model, { history: 'template' }));
    expect(decode(res.turns[1]!.prompt_token_ids!)).toBe(render(res.messages.slice(0, 4)));
  });
});

describe('a template that rewrites earlier turns', () => {
  // Like Qwen3's dropping of past reasoning: an assistant turn's text is rendered only while it is the last one.
  const rewriting = new Template(readFileSync(path.join(__dirname, '../../../configs/templates/smollm2-tools.jinja'), 'utf8')
    .replace("{%- set text = render_content(message.content) -%}", "{%- set text = render_content(message.content) if loop.last else '' -%}"));
  const tok: TokenizerInfo = { modelPath: 'fake', templateSha256: 'x', tokenizerVocabSize: 200_000, endOfTurnIds: new Set([100_001]), decode };
  const replies = () => [
    { text: 'First I look.\n<tool_call>\n{"name": "echo", "arguments": {"text": "a"}}\n</tool_call>' },
    { text: 'Now again.\n<tool_call>\n{"name": "echo", "arguments": {"text": "b"}}\n</tool_call>' },
    { text: 'Done.\n<tool_call>\n{"name": "answer", "arguments": {"files": []}}\n</tool_call>' },
  ];
  const complete = (r: Awaited<ReturnType<typeof runAgent>>) => r.turns.map((t) => ({ ...t, prompt_token_ids: t.prompt_token_ids!, completion_token_ids: t.completion_token_ids!, completion_logprobs: t.completion_logprobs! }));

  test('history "tokens": the episode is one sample all the same', async () => {
    const srv = scriptedServer(replies(), rewriting);
    const res = await runAgent(agentInput(srv.model));
    const a = assembleTrajectory(complete(res), tok, 'split', 'ep');
    expect(res.turns).toHaveLength(3);
    expect(a.breaks).toEqual([]);
    expect(a.segments).toHaveLength(1);
  });

  test('history "template": the template\'s own contexts, a new sample at every rewrite', async () => {
    const srv = scriptedServer(replies(), rewriting);
    const res = await runAgent(agentInput(srv.model, { history: 'template' }));
    const a = assembleTrajectory(complete(res), tok, 'split', 'ep');
    expect(a.breaks.map((b) => [b.turn, b.cause])).toEqual([[1, 'template_rewrote_history'], [2, 'template_rewrote_history']]);
    expect(a.segments).toHaveLength(3);
  });
});
