import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer } from '@huggingface/tokenizers';
import type { ChatMessage, ToolSpec } from '../contracts/trajectory';

/**
 * The model's own tokenizer and chat template, loaded from its local Hugging Face
 * directory (tokenizer.json, tokenizer_config.json, chat_template.jinja, config.json,
 * generation_config.json). The builder never needs it to place generated tokens
 * (those are the server's ids); it needs it to check ids against the vocabulary,
 * to know the end-of-turn tokens, to explain a broken prefix, and for the
 * opt-in re-tokenize fallback.
 */

export class ModelDirError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ModelDirError';
  }
}

export interface ModelTokenizer {
  modelPath: string;
  /** Ids the tokenizer can produce: highest id + 1 (added tokens included). */
  tokenizerVocabSize: number;
  /** config.json's vocab_size (rows of the embedding); undefined for a tokenizer-only directory. */
  modelVocabSize: number | undefined;
  /** Tokens that end an assistant turn: the tokenizer's eos plus generation_config's eos ids. */
  endOfTurnIds: ReadonlySet<number>;
  templateSha256: string;
  tokenizerSha256: string;
  render(messages: ChatMessage[], tools: ToolSpec[], addGenerationPrompt: boolean): string;
  encode(text: string): number[];
  decode(ids: number[]): string;
}

function sha(data: string | Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

function readJson(file: string, what: string): Record<string, unknown> {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
  } catch (err) {
    throw new ModelDirError(`cannot read ${what} ${file}: ${(err as Error).message}. ` +
      'Fix: point model.path at a converted Hugging Face model directory (bash infra/inference.sh setup makes .ratchet/models/SmolLM2-135M-Instruct)');
  }
}

function tokenString(v: unknown): string {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && 'content' in v) return String((v as { content: unknown }).content);
  return '';
}

function chatTemplateSource(dir: string, config: Record<string, unknown>): string {
  const file = path.join(dir, 'chat_template.jinja');
  if (existsSync(file)) return readFileSync(file, 'utf8');
  const t = config.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const def = (t as { name: string; template: string }[]).find((x) => x.name === 'default');
    if (def) return def.template;
  }
  throw new ModelDirError(`model directory ${dir} has no chat template (neither chat_template.jinja nor tokenizer_config.json "chat_template"). ` +
    'Fix: install one, e.g. configs/templates/smollm2-tools.jinja as chat_template.jinja');
}

/** Templates index messages by key; give them plain objects with the fields they test. */
function templateMessage(m: ChatMessage): Record<string, unknown> {
  const out: Record<string, unknown> = { role: m.role, content: m.content ?? '' };
  if (m.tool_calls && m.tool_calls.length > 0) out.tool_calls = m.tool_calls;
  if (m.tool_call_id !== undefined) out.tool_call_id = m.tool_call_id;
  if (m.name !== undefined) out.name = m.name;
  return out;
}

const cache = new Map<string, ModelTokenizer>();

/** Loads (once per process and directory content) the tokenizer of a model directory. */
export function loadModelTokenizer(modelPath: string): ModelTokenizer {
  const dir = path.resolve(modelPath);
  const tokFile = path.join(dir, 'tokenizer.json');
  if (!existsSync(tokFile)) {
    throw new ModelDirError(`model directory ${dir} has no tokenizer.json. ` +
      'Fix: set model.path to a converted Hugging Face model directory (bash infra/inference.sh setup makes .ratchet/models/SmolLM2-135M-Instruct)');
  }
  const tokRaw = readFileSync(tokFile);
  const cfgFile = path.join(dir, 'tokenizer_config.json');
  const cfgRaw = existsSync(cfgFile) ? readFileSync(cfgFile, 'utf8') : '{}';
  const config = JSON.parse(cfgRaw) as Record<string, unknown>;
  const templateSrc = chatTemplateSource(dir, config);
  const tokenizerSha256 = sha(tokRaw);
  const templateSha256 = sha(templateSrc);
  const key = `${dir}\0${tokenizerSha256}\0${templateSha256}`;
  const hit = cache.get(key);
  if (hit) return hit;

  const tokJson = JSON.parse(tokRaw.toString('utf8')) as Record<string, unknown>;
  const tokenizer = new Tokenizer(tokJson, config);
  let maxId = -1;
  for (const id of tokenizer.get_vocab(true).values()) if (id > maxId) maxId = id;
  const tokenizerVocabSize = maxId + 1;

  const modelCfgFile = path.join(dir, 'config.json');
  const modelVocabSize = existsSync(modelCfgFile)
    ? (readJson(modelCfgFile, 'model config').vocab_size as number | undefined)
    : undefined;
  if (modelVocabSize !== undefined && tokenizerVocabSize > modelVocabSize) {
    throw new ModelDirError(`tokenizer ${tokFile} has ids up to ${tokenizerVocabSize - 1} but ${modelCfgFile} says vocab_size ${modelVocabSize}: ` +
      'the tokenizer does not belong to this model. Fix: copy the tokenizer files of the same model into the directory');
  }

  const eosNames = [tokenString(config.eos_token)].filter((s) => s.length > 0);
  const endOfTurnIds = new Set<number>();
  for (const n of eosNames) {
    const id = tokenizer.token_to_id(n);
    if (id !== undefined) endOfTurnIds.add(id);
  }
  const genFile = path.join(dir, 'generation_config.json');
  if (existsSync(genFile)) {
    const eos = readJson(genFile, 'generation config').eos_token_id;
    for (const id of Array.isArray(eos) ? eos : eos === undefined ? [] : [eos]) endOfTurnIds.add(Number(id));
  }

  const template = new Template(templateSrc);
  const bos = tokenString(config.bos_token);
  const eos = tokenString(config.eos_token);
  const result: ModelTokenizer = {
    modelPath: dir,
    tokenizerVocabSize,
    modelVocabSize,
    endOfTurnIds,
    templateSha256,
    tokenizerSha256,
    render(messages, tools, addGenerationPrompt) {
      return template.render({
        messages: messages.map(templateMessage),
        tools: tools.length > 0 ? tools : undefined,
        add_generation_prompt: addGenerationPrompt,
        bos_token: bos,
        eos_token: eos,
      });
    },
    // Chat templates already spell out every special token: never add a BOS of our own (vLLM does the same for chat).
    encode: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
    decode: (ids) => tokenizer.decode(ids, { skip_special_tokens: false }),
  };
  cache.set(key, result);
  return result;
}
