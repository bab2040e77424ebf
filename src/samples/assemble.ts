import type { Turn } from '../contracts/trajectory';
import { BatchBuildError } from './errors';
import type { ModelTokenizer } from './tokenizer';

/**
 * Turns one trajectory's turns into token sequences (pure), token-in token-out:
 * generated tokens are exactly the ids and logprobs the server sampled; the tokens
 * the environment added between turns (tool results, template scaffolding) are the
 * part of turn k+1's server-side prompt ids past turn k's prompt + completion.
 *
 * That splice is only right if turn k+1's prompt ids extend turn k's prompt +
 * completion ids. Where they do not, merging would give the completion a context
 * (and position ids) the model never saw, so the trajectory is cut there
 * (non_prefix_policy "split": a new sample starts from turn k+1's own prompt) or
 * the build fails ("fail"). Causes seen in practice:
 *  - template_rewrote_history: the template renders earlier messages (the reply
 *    included) as different text once more follow (Qwen3 drops past <think> blocks;
 *    `loop.first` system logic; vLLM re-serializing tool-call arguments as JSON);
 *  - assistant_retokenized: the server re-encoded the reply's same text to other
 *    ids (the model sampled a non-canonical BPE split);
 *  - stop_token_not_rendered: the completion ended with a stop token the template
 *    does not write back (e.g. <|endoftext|> where it renders <|im_end|>).
 * vLLM's `token_ids` include the EOS that stopped the turn (<|im_end|> for ChatML
 * models), which the template renders back, so that case extends cleanly; a turn
 * without it (finish_reason "length", or a server that strips it) also extends
 * cleanly: the template's <|im_end|> then arrives as masked scaffolding.
 */

export type NonPrefixCause = 'template_rewrote_history' | 'assistant_retokenized' | 'stop_token_not_rendered';
export type NonPrefixPolicy = 'split' | 'fail';

export interface Segment {
  ids: number[];
  /** 1 where the policy sampled the token. */
  mask: number[];
  /** The server's logprob of each sampled token, 0 elsewhere. */
  logprobs: number[];
  firstTurn: number;
  lastTurn: number;
  /** Oldest policy that produced a turn of this segment. */
  minPolicyVersion: number;
  /** Some turn stopped at the server's max_tokens. */
  lengthFinished: boolean;
}

export interface PrefixBreak {
  turn: number;
  cause: NonPrefixCause;
  /** First token index where turn `turn`'s prompt differs from the previous prompt + completion. */
  at: number;
}

export interface Assembly {
  segments: Segment[];
  breaks: PrefixBreak[];
}

export type TokenizerInfo = Pick<ModelTokenizer, 'modelPath' | 'templateSha256' | 'tokenizerVocabSize' | 'endOfTurnIds' | 'decode'>;

export interface CompleteTurn extends Turn {
  prompt_token_ids: number[];
  completion_token_ids: number[];
  completion_logprobs: number[];
}

function firstMismatch(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return n;
}

function checkIds(ids: readonly number[], vocab: number, where: string, tok: TokenizerInfo): void {
  for (let i = 0; i < ids.length; i++) {
    const id = ids[i]!;
    if (id >= vocab) {
      throw new BatchBuildError('TokenOutOfVocab', `${where}[${i}] is token id ${id}, outside the tokenizer of ${tok.modelPath} ` +
        `(ids 0..${vocab - 1}): the rollouts were sampled from another model. ` +
        'Fix: serve the model named by model.path, or point model.path at the model the inference server runs');
    }
  }
}

export function classifyBreak(prevPromptLen: number, prev: readonly number[], prompt: readonly number[], tok: Pick<TokenizerInfo, 'endOfTurnIds' | 'decode'>): PrefixBreak['cause'] {
  const at = firstMismatch(prev, prompt);
  if (at < prevPromptLen) return 'template_rewrote_history';
  if (at === prev.length - 1 && tok.endOfTurnIds.has(prev[at]!)) return 'stop_token_not_rendered';
  // Same text under different ids is the server re-tokenizing the reply; different text is the template re-rendering it.
  let end = prevPromptLen;
  while (end < prompt.length && !tok.endOfTurnIds.has(prompt[end]!)) end++;
  const sampledEnd = tok.endOfTurnIds.has(prev[prev.length - 1]!) ? prev.length - 1 : prev.length;
  const sampled = tok.decode(prev.slice(prevPromptLen, sampledEnd));
  const rendered = tok.decode(prompt.slice(prevPromptLen, end));
  return sampled === rendered
    ? 'assistant_retokenized' : 'template_rewrote_history';
}

function describeBreak(label: string, turn: number, cause: NonPrefixCause, at: number, prev: readonly number[], prompt: readonly number[], tok: TokenizerInfo): string {
  const ctx = (ids: readonly number[]) => {
    const part = ids.slice(Math.max(0, at - 8), at + 8);
    return JSON.stringify(tok.decode(part));
  };
  return `${label}: turn ${turn}'s prompt_token_ids do not extend turn ${turn - 1}'s prompt + completion ids ` +
    `(first difference at token ${at}: before ${ctx(prev)}, now ${ctx(prompt)}); cause: ${cause}. ` +
    `Chat template sha256 ${tok.templateSha256} of ${tok.modelPath}. ` +
    'Fix: use a prefix-stable chat template (configs/templates/smollm2-tools.jinja is one), ' +
    'or set orchestrator.non_prefix_policy = "split" to train each consistent run of turns as its own sample';
}

/** `turns` must all carry ids (see retokenize.ts for the fallback that fills them). */
export function assembleTrajectory(turns: readonly CompleteTurn[], tok: TokenizerInfo, policy: NonPrefixPolicy, label: string): Assembly {
  const segments: Segment[] = [];
  const breaks: PrefixBreak[] = [];
  let cur: Segment | undefined;
  let prevPromptLen = 0;
  const vocab = tok.tokenizerVocabSize;
  turns.forEach((t, k) => {
    const p = t.prompt_token_ids;
    const c = t.completion_token_ids;
    const lp = t.completion_logprobs;
    if (lp.length !== c.length) {
      throw new BatchBuildError('MalformedTrajectory', `${label}: turns[${k}] has ${c.length} completion_token_ids but ${lp.length} completion_logprobs; ` +
        'they must pair one to one. Fix: the rollout worker must store the server\'s logprobs.content entries unchanged');
    }
    checkIds(p, vocab, `${label}: turns[${k}].prompt_token_ids`, tok);
    checkIds(c, vocab, `${label}: turns[${k}].completion_token_ids`, tok);
    if (cur) {
      const at = firstMismatch(cur.ids, p);
      if (at === cur.ids.length) {
        for (let i = cur.ids.length; i < p.length; i++) {
          cur.ids.push(p[i]!);
          cur.mask.push(0);
          cur.logprobs.push(0);
        }
      } else {
        const cause = classifyBreak(prevPromptLen, cur.ids, p, tok);
        if (policy === 'fail') throw new BatchBuildError('NonPrefixTemplate', describeBreak(label, k, cause, at, cur.ids, p, tok));
        breaks.push({ turn: k, cause, at });
        segments.push(cur);
        cur = undefined;
      }
    }
    if (!cur) {
      cur = { ids: p.slice(), mask: new Array<number>(p.length).fill(0), logprobs: new Array<number>(p.length).fill(0),
        firstTurn: k, lastTurn: k, minPolicyVersion: t.policy_version, lengthFinished: false };
    }
    prevPromptLen = p.length;
    for (let i = 0; i < c.length; i++) {
      cur.ids.push(c[i]!);
      cur.mask.push(1);
      cur.logprobs.push(lp[i]!);
    }
    cur.lastTurn = k;
    cur.minPolicyVersion = Math.min(cur.minPolicyVersion, t.policy_version);
    if (t.finish_reason === 'length') cur.lengthFinished = true;
  });
  if (cur) segments.push(cur);
  // A sample's first token has no context to be predicted from.
  for (const s of segments) if (s.mask.length > 0) { s.mask[0] = 0; s.logprobs[0] = 0; }
  return { segments, breaks };
}
