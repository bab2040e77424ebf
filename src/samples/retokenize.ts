import type { Trajectory, Turn } from '../contracts/trajectory';
import type { CompleteTurn } from './assemble';
import { BatchBuildError } from './errors';
import type { ModelTokenizer } from './tokenizer';

/**
 * Token ids for turns whose server did not return them. Without ids the builder
 * would have to re-tokenize generated text, which is not what the model sampled
 * (retokenization drift), so this is refused unless the run opts in
 * (orchestrator.allow_retokenize); the sample is then flagged in the manifest.
 * Logprobs cannot be recomputed here: the trainer's importance ratio needs the
 * server's, so a turn must still carry them, one per re-encoded token.
 */

function missingFields(t: Turn): string[] {
  const out: string[] = [];
  if (t.prompt_token_ids === null) out.push('prompt_token_ids');
  if (t.completion_token_ids === null) out.push('completion_token_ids');
  if (t.completion_logprobs === null) out.push('completion_logprobs');
  return out;
}

const SERVER_FIX = 'Fix: have the inference server return them (vLLM: send "return_token_ids": true and "logprobs": true ' +
  'with each chat completion request; vLLM >= 0.10.2 returns prompt_token_ids and choices[].token_ids)';

export function hasAllIds(t: Turn): t is CompleteTurn {
  return t.prompt_token_ids !== null && t.completion_token_ids !== null && t.completion_logprobs !== null;
}

/** Why turn k's reply cannot be given ids of its own by the template (renderTurnIds). */
export class TurnRenderError extends Error {
  constructor(readonly kind: 'not-a-reply' | 'not-a-prefix', message: string) {
    super(message);
    this.name = 'TurnRenderError';
  }
}

export type TemplateTokenizer = Pick<ModelTokenizer, 'render' | 'encode' | 'decode' | 'endOfTurnIds' | 'modelPath' | 'templateSha256'>;

/**
 * Turn k's prompt and reply as the model's own template renders them, encoded: the prompt
 * is the conversation before the reply (with the generation prompt), the reply is what the
 * template adds for it, up to its end-of-turn token. One home for the builder (re-tokenizing a
 * turn whose server returned no ids) and SFT (demonstrations that carry none).
 */
export function renderTurnIds(traj: Trajectory, turn: Pick<Turn, 'prompt_message_count'>, k: number, tok: TemplateTokenizer): { prompt: number[]; completion: number[] } {
  const upto = turn.prompt_message_count;
  const msg = traj.messages[upto];
  if (!msg || msg.role !== 'assistant') {
    throw new TurnRenderError('not-a-reply', `turns[${k}].prompt_message_count = ${upto} but messages[${upto}] is ` +
      `${msg ? `a ${msg.role} message` : 'missing'}, not the assistant reply of that turn`);
  }
  const promptText = tok.render(traj.messages.slice(0, upto), traj.tools, true);
  const fullText = tok.render(traj.messages.slice(0, upto + 1), traj.tools, false);
  if (!fullText.startsWith(promptText)) {
    throw new TurnRenderError('not-a-prefix', `turn ${k}: the chat template of ${tok.modelPath} (sha256 ${tok.templateSha256.slice(0, 12)}) ` +
      'renders the conversation with this reply so that it does not extend the prompt it rendered without it');
  }
  let completionText = fullText.slice(promptText.length);
  // The template closes the reply with end-of-turn + newline; the model generates the former, not the latter.
  const lastEot = [...tok.endOfTurnIds].map((id) => tok.decode([id])).reduce((best, s) => {
    const i = completionText.lastIndexOf(s);
    return i >= 0 && i + s.length > best ? i + s.length : best;
  }, -1);
  if (lastEot > 0) completionText = completionText.slice(0, lastEot);
  return { prompt: tok.encode(promptText), completion: tok.encode(completionText) };
}

/** renderTurnIds for the builder: its failures are RetokenizeFailed batch errors. */
function retokenizeTurn(traj: Trajectory, k: number, tok: ModelTokenizer, label: string): { prompt: number[]; completion: number[] } {
  try {
    return renderTurnIds(traj, traj.turns[k]!, k, tok);
  } catch (err) {
    if (!(err instanceof TurnRenderError)) throw err;
    throw new BatchBuildError('RetokenizeFailed', `${label}: ${err.message}; cannot re-tokenize this turn`);
  }
}

/**
 * Returns turns that all carry ids, and whether any had to be re-tokenized.
 * Throws MissingTokenIds (naming the server setting) unless allowRetokenize.
 */
export function completeTurns(traj: Trajectory, tok: ModelTokenizer, allowRetokenize: boolean, label: string): { turns: CompleteTurn[]; retokenized: boolean } {
  let retokenized = false;
  const turns = traj.turns.map((t, k): CompleteTurn => {
    if (hasAllIds(t)) return t;
    const missing = missingFields(t);
    if (!allowRetokenize || t.completion_logprobs === null) {
      throw new BatchBuildError('MissingTokenIds', `${label}: turns[${k}].${missing.join(', ')} ${missing.length > 1 ? 'are' : 'is'} null: ` +
        `the inference server did not return ${t.completion_logprobs === null ? 'logprobs (needed by the trainer, and never recomputed here)' : 'token ids'}. ` +
        SERVER_FIX + (t.completion_logprobs === null ? '' : ', or set orchestrator.allow_retokenize = true to re-tokenize the text (flagged in the manifest)'));
    }
    const re = retokenizeTurn(traj, k, tok, label);
    let completion = t.completion_token_ids ?? re.completion;
    // A turn cut at max_tokens never generated the template's end-of-turn token.
    if (completion.length === t.completion_logprobs.length + 1 && tok.endOfTurnIds.has(completion[completion.length - 1]!)) completion = completion.slice(0, -1);
    const lp = t.completion_token_ids !== null ? t.completion_logprobs : pairLogprobsByContent(t, completion, tok, `${label}: turn ${k}`);
    if (completion.length !== lp.length) {
      throw new BatchBuildError('RetokenizeFailed', `${label}: turn ${k}: the reply has ${completion.length} tokens but the server ` +
        `returned ${lp.length} logprobs, so they cannot be paired. ${SERVER_FIX}`);
    }
    retokenized = true;
    return { ...t, prompt_token_ids: t.prompt_token_ids ?? re.prompt, completion_token_ids: completion, completion_logprobs: lp };
  });
  return { turns, retokenized };
}

/**
 * The server's logprob for each re-encoded token, matched by text: token j gets the
 * logprob of the server token covering exactly the same characters of the reply.
 * Equal counts prove nothing (" foo"+"bar" vs " fo"+"obar"), so pairing by position
 * could give a token another token's logprob; where the two tokenizations
 * cut the text differently, no logprob belongs to the token and the turn is refused.
 */
export function pairLogprobsByContent(t: Turn, ids: readonly number[], tok: Pick<ModelTokenizer, 'decode'>, where: string): number[] {
  const lp = t.completion_logprobs ?? [];
  const serverTokens = t.completion_logprob_tokens;
  if (!serverTokens || serverTokens.length !== lp.length) {
    throw new BatchBuildError('RetokenizeFailed', `${where}: the server returned no token text beside its logprobs ` +
      '(choices[].logprobs.content[].token), so re-encoded tokens cannot be paired with them by content. ' +
      'Fix: keep the server\'s logprobs content in the trajectory, or have it return token ids (then nothing is re-tokenized)');
  }
  const serverEnds = new Map<number, number>(); // end offset of each server token -> its index, keyed with its start
  const serverStart: number[] = [];
  let pos = 0;
  serverTokens.forEach((s, i) => { serverStart.push(pos); pos += s.length; serverEnds.set(pos, i); });
  const serverText = serverTokens.join('');
  const out: number[] = [];
  let at = 0;
  const mine = ids.map((id) => tok.decode([id]));
  if (mine.join('') !== serverText) {
    throw new BatchBuildError('RetokenizeFailed', `${where}: the re-encoded reply reads ${JSON.stringify(mine.join('').slice(0, 80))} but the server's ` +
      `tokens read ${JSON.stringify(serverText.slice(0, 80))}; the logprobs are of other text`);
  }
  for (let j = 0; j < mine.length; j++) {
    const end = at + mine[j]!.length;
    const i = serverEnds.get(end);
    if (i === undefined || serverStart[i] !== at) {
      throw new BatchBuildError('RetokenizeFailed', `${where}: at character ${at} the re-encoded token ${JSON.stringify(mine[j])} does not match one ` +
        `server token (the server cut the text differently), so no logprob belongs to it. ${SERVER_FIX}`);
    }
    out.push(lp[i]!);
    at = end;
  }
  return out;
}
