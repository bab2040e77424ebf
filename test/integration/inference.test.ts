import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import OpenAI from 'openai';
import { loadModelTokenizer } from '../../src/samples/tokenizer';
import type { ChatMessage, ToolSpec } from '../../src/contracts/trajectory';
import { describeWithStack, REPO, STATE } from '../helpers/stack';

/**
 * The inference server of the local stack (infra/inference.sh: vLLM on the CPU serving
 * SmolLM2-135M-Instruct) against the interface the rollout workers and weight sync use:
 * tool calls, token ids + logprobs, runtime LoRA loading.
 */

const BASE_URL = process.env.RATCHET_VLLM_URL ?? 'http://127.0.0.1:8000/v1';
const MODEL = 'smollm2-135m';
const MODEL_DIR = path.join(STATE, 'models', 'SmolLM2-135M-Instruct');

const BASH_TOOL: ToolSpec = {
  type: 'function',
  function: {
    name: 'bash',
    description: 'Run a shell command and return its output',
    parameters: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] },
  },
};

/** vLLM's extensions to the OpenAI response, which the SDK's types do not list. */
interface VllmChoice {
  token_ids?: number[] | null;
  logprobs?: { content?: { token: string; logprob: number }[] | null } | null;
  message: OpenAI.Chat.Completions.ChatCompletionMessage;
  finish_reason: string;
}
interface VllmCompletion {
  prompt_token_ids?: number[] | null;
  choices: VllmChoice[];
  usage?: { prompt_tokens: number; completion_tokens: number };
}

/** vLLM-only request fields (return_token_ids, seed) go in the body; the SDK passes them through. */
async function chat(client: OpenAI, body: Record<string, unknown>): Promise<VllmCompletion> {
  const res = await client.chat.completions.create(body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
  return res as unknown as VllmCompletion;
}

async function post(route: string, body: unknown): Promise<{ status: number; text: string }> {
  const res = await fetch(`${BASE_URL}/${route}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body),
  });
  return { status: res.status, text: await res.text() };
}

async function modelIds(client: OpenAI): Promise<string[]> {
  const list = await client.models.list();
  return list.data.map((m) => m.id);
}

function tokenLogprobs(choice: VllmChoice | undefined): number[] {
  return (choice?.logprobs?.content ?? []).map((t) => t.logprob);
}

describeWithStack('inference server (vLLM, OpenAI API)', ['inference', 'model'], () => {
  const client = new OpenAI({ baseURL: BASE_URL, apiKey: 'unused', timeout: 120_000, maxRetries: 0 });

  test('a required bash tool call comes back parsed, with token ids and logprobs of equal length', async () => {
    // SmolLM2-135M does not call tools unprompted: one worked example primes the format and
    // tool_choice "required" makes vLLM constrain the output, so this checks the server, not
    // the model. vLLM constrains to the hermes text the chat template renders.
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a coding agent. Act only through the bash tool.' },
      { role: 'user', content: 'Show the current date.' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'bash', arguments: '{"command": "date"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_0', content: 'Sun Nov 22 15:50:00 UTC 2026' },
      { role: 'user', content: 'List the files in the current directory.' },
    ];
    const res = await chat(client, {
      model: MODEL,
      messages,
      tools: [BASH_TOOL],
      tool_choice: 'required',
      temperature: 0,
      max_tokens: 64,
      seed: 1,
      logprobs: true,
      return_token_ids: true,
    });
    const choice = res.choices[0];
    expect(choice).toBeDefined();
    expect(choice!.finish_reason).toBe('tool_calls');
    const call = choice!.message.tool_calls?.[0];
    expect(call?.function.name).toBe('bash');
    const args = JSON.parse(call!.function.arguments) as { command?: unknown };
    expect(typeof args.command).toBe('string');

    const ids = choice!.token_ids ?? [];
    const lps = tokenLogprobs(choice);
    expect(ids.length).toBeGreaterThan(0);
    expect(lps).toHaveLength(ids.length);
    expect(lps.every((lp) => Number.isFinite(lp) && lp <= 0)).toBe(true);
    expect(res.usage?.completion_tokens).toBe(ids.length);
    expect(res.prompt_token_ids?.length).toBe(res.usage?.prompt_tokens);

    // The parsed call, rendered back by the chat template, is the text the model sampled:
    // the next turn's prompt continues the sampled turn. (Compared as text: the sampler may
    // pick a non-canonical tokenization, which is why the builder keeps the server's ids.)
    const tok = loadModelTokenizer(MODEL_DIR);
    expect(tok.endOfTurnIds.has(ids[ids.length - 1]!)).toBe(true);
    const next: ChatMessage[] = [...messages, {
      role: 'assistant', content: choice!.message.content ?? '',
      tool_calls: [{ id: call!.id, type: 'function', function: { name: call!.function.name, arguments: call!.function.arguments } }],
    }];
    const sampledText = tok.decode(ids.slice(0, -1));
    expect(tok.render(next, [BASH_TOOL], false))
      .toBe(`${tok.render(messages, [BASH_TOOL], true)}${sampledText}<|im_end|>\n`);
  });

  test('the server tokenizes a multi-turn tool conversation exactly as the TypeScript tokenizer does', async () => {
    // The sample builder splices server-sampled ids between locally tokenized turns;
    // that only works if both sides render the same chat template to the same ids.
    const messages: ChatMessage[] = [
      { role: 'system', content: 'You are a coding agent.' },
      { role: 'user', content: 'Which files are here?' },
      {
        role: 'assistant',
        content: '',
        tool_calls: [{ id: 'call_0', type: 'function', function: { name: 'bash', arguments: '{"command": "ls -a"}' } }],
      },
      { role: 'tool', tool_call_id: 'call_0', content: 'a.py\nb.py' },
    ];
    const res = await chat(client, {
      model: MODEL, messages, tools: [BASH_TOOL], max_tokens: 1, temperature: 0, return_token_ids: true,
    });
    const tok = loadModelTokenizer(MODEL_DIR);
    const local = tok.encode(tok.render(messages, [BASH_TOOL], true));
    expect(res.prompt_token_ids).toEqual(local);

    // Prefix stability: each shorter conversation renders to a prefix of the longer one.
    for (let k = 2; k < messages.length; k++) {
      const shorter = tok.render(messages.slice(0, k), [BASH_TOOL], false);
      expect(tok.render(messages.slice(0, k + 1), [BASH_TOOL], false).startsWith(shorter)).toBe(true);
    }
  });

  describeWithStack('runtime LoRA loading', ['trainerVenv'], () => {
    const adapterName = 'policy-v1';
    let adapterDir = '';

    beforeAll(() => {
      adapterDir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-test-lora-'));
      execFileSync(path.join(STATE, 'venvs', 'trainer', 'bin', 'python'), [
        path.join(REPO, 'infra', 'vllm', 'make_test_lora.py'), '--base', MODEL_DIR, '--out', adapterDir,
      ], { stdio: 'inherit', timeout: 300_000 });
    });

    afterAll(async () => {
      // Leave the shared server as we found it even when an assertion failed half-way.
      if (adapterDir) {
        if ((await modelIds(client)).includes(adapterName)) await post('unload_lora_adapter', { lora_name: adapterName });
        rmSync(adapterDir, { recursive: true, force: true });
      }
    });

    test('an adapter loads under policy-v1, changes the logprobs, and unloads', async () => {
      const load = await post('load_lora_adapter', { lora_name: adapterName, lora_path: adapterDir });
      expect({ status: load.status, body: load.text }).toMatchObject({ status: 200 });
      expect(await modelIds(client)).toEqual(expect.arrayContaining([MODEL, adapterName]));

      const request = {
        messages: [{ role: 'user', content: 'Write a haiku about compilers.' }],
        temperature: 0, max_tokens: 8, seed: 7, logprobs: true, return_token_ids: true,
      };
      const base = tokenLogprobs((await chat(client, { ...request, model: MODEL })).choices[0]);
      const tuned = tokenLogprobs((await chat(client, { ...request, model: adapterName })).choices[0]);
      expect(base.length).toBeGreaterThan(0);
      expect(tuned.length).toBeGreaterThan(0);
      const n = Math.min(base.length, tuned.length);
      const maxDiff = Math.max(...base.slice(0, n).map((lp, i) => Math.abs(lp - tuned[i]!)));
      expect(maxDiff).toBeGreaterThan(1e-3);

      const unload = await post('unload_lora_adapter', { lora_name: adapterName });
      expect({ status: unload.status, body: unload.text }).toMatchObject({ status: 200 });
      expect(await modelIds(client)).not.toContain(adapterName);
    });
  });
});
