import { Trajectory, type Turn } from '../contracts/trajectory';
import { assembleTrajectory, type CompleteTurn, type Segment } from '../samples/assemble';
import { BatchBuildError } from '../samples/errors';
import { countTrainable } from '../samples/mask';
import { renderTurnIds, TurnRenderError } from '../samples/retokenize';
import type { ModelTokenizer } from '../samples/tokenizer';

/**
 * Trajectories for supervised fine-tuning (SftRun), in Ratchet's own format
 * (src/contracts/trajectory.ts). Three sources give them: scripted demonstrations
 * (their turns carry no token ids: no server sampled them), the successful episodes
 * of a run or eval sweep (rejection sampling: the server's own ids), and a user's
 * JSONL file (either). Every one is checked against the model's chat template here,
 * and every error names where the trajectory came from (file and line).
 *
 * Tokens always come from the model's template: a turn without ids is rendered and
 * encoded; a turn with ids must equal that rendering, else it was tokenized with
 * another template and training on it would teach the model a format it never sees.
 */

export class SftDataError extends Error {
  constructor(public readonly code: 'MalformedTrajectory' | 'TemplateMismatch' | 'NoTrainableTokens' | 'NoTrajectories', message: string) {
    super(message);
    this.name = 'SftDataError';
  }
}

type Tok = Pick<ModelTokenizer, 'render' | 'encode' | 'decode' | 'endOfTurnIds' | 'modelPath' | 'templateSha256' | 'tokenizerVocabSize'>;

const TEMPLATE_FIX = 'Fix: make the trajectories with this model (model.path), or drop the token ids from its turns ' +
  '(prompt_token_ids / completion_token_ids = null) so they are tokenized with this model\'s template';

/** The turns of a trajectory that records none: one per assistant message, each prompted by everything before it. */
export function turnsFromMessages(traj: Trajectory): Turn[] {
  const turns: Turn[] = [];
  traj.messages.forEach((m, i) => {
    if (m.role !== 'assistant' || i === 0) return;
    turns.push({
      prompt_message_count: i, prompt_token_ids: null, completion_token_ids: null, completion_logprobs: null,
      finish_reason: m.tool_calls?.length ? 'tool_calls' : 'stop', policy_version: 0, model_ms: 0, tools_ms: 0,
    });
  });
  return turns;
}

/** Turn k's prompt and completion as the model's template renders them; failures are SftDataErrors with their fix. */
function renderTurn(traj: Trajectory, t: Turn, k: number, tok: Tok, where: string): { prompt: number[]; completion: number[] } {
  try {
    return renderTurnIds(traj, t, k, tok);
  } catch (err) {
    if (!(err instanceof TurnRenderError)) throw err;
    if (err.kind === 'not-a-reply') {
      throw new SftDataError('MalformedTrajectory', `${where}: ${err.message}. Fix: prompt_message_count counts the messages before the reply`);
    }
    throw new SftDataError('TemplateMismatch', `${where}: ${err.message}, so the reply has no tokens of its own. ` +
      'Fix: use a prefix-stable chat template (configs/templates/smollm2-tools.jinja is one)');
  }
}

function sameIds(a: readonly number[], b: readonly number[]): number {
  const n = Math.min(a.length, b.length);
  for (let i = 0; i < n; i++) if (a[i] !== b[i]) return i;
  return a.length === b.length ? -1 : n;
}

/**
 * Every turn with ids from the model's template. Logprobs are not needed (the SFT
 * loss reads none) and are set to 0. A turn that carries ids must match the
 * template's rendering of its prompt; its completion must start the same way.
 */
export function sftTurns(traj: Trajectory, tok: Tok, where: string): CompleteTurn[] {
  const turns = traj.turns.length > 0 ? traj.turns : turnsFromMessages(traj);
  if (turns.length === 0) {
    throw new SftDataError('NoTrainableTokens', `${where}: the trajectory has no assistant message after the first, so no token is the policy's ` +
      'and its loss mask would cover nothing. Fix: include the assistant replies the model should learn');
  }
  return turns.map((t, k): CompleteTurn => {
    const r = renderTurn(traj, t, k, tok, where);
    if (t.prompt_token_ids !== null) {
      const at = sameIds(t.prompt_token_ids, r.prompt);
      if (at >= 0) {
        throw new SftDataError('TemplateMismatch', `${where}: turns[${k}].prompt_token_ids differ from this model's chat template rendering ` +
          `(${tok.modelPath}, template sha256 ${tok.templateSha256.slice(0, 12)}) at token ${at}: ` +
          `stored ${JSON.stringify(tok.decode(t.prompt_token_ids.slice(Math.max(0, at - 4), at + 8)))}, ` +
          `template ${JSON.stringify(tok.decode(r.prompt.slice(Math.max(0, at - 4), at + 8)))}. ${TEMPLATE_FIX}`);
      }
    }
    const completion = t.completion_token_ids ?? r.completion;
    return {
      ...t, prompt_token_ids: t.prompt_token_ids ?? r.prompt, completion_token_ids: completion,
      completion_logprobs: new Array<number>(completion.length).fill(0),
    };
  });
}

/** The trajectory's samples (one, or several where the template is not prefix-stable), each with at least one trainable token. */
export function sftSegments(traj: Trajectory, tok: Tok, where: string): Segment[] {
  let segments: Segment[];
  try {
    segments = assembleTrajectory(sftTurns(traj, tok, where), tok, 'split', where).segments;
  } catch (err) {
    if (err instanceof BatchBuildError) throw new SftDataError('TemplateMismatch', `${err.message}. ${TEMPLATE_FIX}`);
    throw err;
  }
  const trainable = segments.reduce((a, s) => a + countTrainable(s.mask), 0);
  if (trainable === 0) {
    throw new SftDataError('NoTrainableTokens', `${where}: the loss mask covers no token (every assistant reply is empty). ` +
      'Fix: include the assistant replies the model should learn, or drop this trajectory');
  }
  return segments;
}

/** One trajectory of a JSONL file, with where it came from. */
export interface SftItem {
  trajectory: Trajectory;
  /** `file:line` */
  where: string;
}

/**
 * Parses a JSONL file of trajectories; checks each against the model's template. Every
 * error names the file and the line. Blank lines are skipped.
 */
export function parseSftJsonl(text: string, file: string, tok: Tok): SftItem[] {
  const out: SftItem[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    const where = `${file}:${i + 1}`;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new SftDataError('MalformedTrajectory', `${where}: not JSON (${(err as Error).message}). Fix: one trajectory object per line`);
    }
    const parsed = Trajectory.safeParse(raw);
    if (!parsed.success) {
      const issue = parsed.error.issues[0]!;
      throw new SftDataError('MalformedTrajectory', `${where}: field ${issue.path.join('.') || '(root)'}: ${issue.message}. ` +
        'Fix: each line is a ratchet.trajectory/v1 object (src/contracts/trajectory.ts, docs/contracts.md)');
    }
    sftSegments(parsed.data, tok, where); // throws with the line on a template mismatch or an empty mask
    out.push({ trajectory: parsed.data, where });
  });
  if (out.length === 0) throw new SftDataError('NoTrajectories', `${file}: no trajectories (the file is empty). Fix: one trajectory per line`);
  return out;
}

/**
 * Rejection sampling: the episodes worth imitating. Completed episodes whose reward
 * reaches `minReward`; unscored or failed episodes never qualify.
 */
export function successful(trajs: readonly Trajectory[], minReward: number): Trajectory[] {
  return trajs.filter((t) => t.stop_reason === 'completed' && t.reward !== undefined && t.reward.total >= minReward);
}
