/**
 * SFT data: demonstrations tokenized with the model's own template, the loss mask on
 * exactly the policy's replies, a user's JSONL checked with errors that name the file
 * and the line, rejection sampling, and the seeded order of steps.
 */
import type { Trajectory } from '../../../src/contracts/trajectory';
import { buildSftBatch, sftStepIndices } from '../../../src/sft/batch';
import { parseSftJsonl, sftSegments, successful } from '../../../src/sft/trajectories';
import { loadModelTokenizer, type ModelTokenizer } from '../../../src/samples/tokenizer';
import { simulateTrajectory, SMOLLM2_DIR, smolLM2Available, toolConversation } from '../../fixtures/samples/simulate';

/** A demonstration: the conversation only, no turns (no server sampled it). */
function demo(tok: ModelTokenizer): Trajectory {
  const conv = toolConversation();
  const t = simulateTrajectory(tok, { ...conv });
  return { ...t, turns: [] };
}

describe('sftStepIndices', () => {
  test('each epoch visits every trajectory once, in a seeded order; the same (seed, step) gives the same batch', () => {
    const n = 7;
    const epoch0 = [0, 1, 2].flatMap((s) => sftStepIndices(n, 3, 5, s)).slice(0, n);
    expect([...epoch0].sort()).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(sftStepIndices(n, 3, 5, 4)).toEqual(sftStepIndices(n, 3, 5, 4));
    expect(sftStepIndices(n, 7, 5, 0)).not.toEqual(sftStepIndices(n, 7, 6, 0));
  });
});

describe('successful (rejection sampling)', () => {
  const t = (stop: Trajectory['stop_reason'], reward?: number) => ({ stop_reason: stop, reward: reward === undefined ? undefined : { total: reward, components: {} } }) as Trajectory;
  test('completed episodes at or above the reward bar only', () => {
    const all = [t('completed', 1), t('completed', 0.4), t('max_turns', 1), t('infra_error'), t('completed', 0.5)];
    expect(successful(all, 0.5)).toEqual([all[0], all[4]]);
  });
});

(smolLM2Available() ? describe : describe.skip)('SFT trajectories (SmolLM2 template)', () => {
  let tok: ModelTokenizer;
  beforeAll(() => { tok = loadModelTokenizer(SMOLLM2_DIR); });

  test('a demonstration is tokenized by the template, and its mask covers exactly the assistant replies', () => {
    const d = demo(tok);
    const segs = sftSegments(d, tok, 'demo');
    expect(segs).toHaveLength(1);
    const s = segs[0]!;
    // The whole sample is the template's rendering of the conversation (up to the last reply's end-of-turn).
    const full = tok.render(d.messages, d.tools, false);
    expect(full.startsWith(tok.decode(s.ids))).toBe(true);
    // Masked-in text is the three replies, and nothing of the prompt or the tool outputs.
    const masked = tok.decode(s.ids.filter((_, i) => s.mask[i] === 1));
    expect(masked).toContain('Let me look for the parser first.');
    expect(masked).toContain('src/pkg/parser.py"]');
    expect(masked).not.toContain('def parse(text)'); // a tool output
    expect(masked).not.toContain('Splitting on whitespace'); // the user prompt
    // Every masked-out run is prompt or tool output: the replies' tokens are all in.
    for (const m of d.messages.filter((x) => x.role === 'tool')) expect(masked).not.toContain(m.content!.slice(0, 20));
  });

  test('a rollout with the server\'s ids trains the same tokens as the demonstration of the same conversation', () => {
    const conv = toolConversation();
    const withIds = simulateTrajectory(tok, { ...conv });
    const a = sftSegments(withIds, tok, 'rollout')[0]!;
    const b = sftSegments({ ...withIds, turns: [] }, tok, 'demo')[0]!;
    expect(a.ids).toEqual(b.ids);
    expect(a.mask).toEqual(b.mask);
  });

  test('a user file: errors name the file and the line', () => {
    const good = JSON.stringify(simulateTrajectory(tok, { ...toolConversation() }));
    expect(parseSftJsonl(`${good}\n\n${good}\n`, 'mine.jsonl', tok).map((x) => x.where)).toEqual(['mine.jsonl:1', 'mine.jsonl:3']);
    expect(() => parseSftJsonl(`${good}\n{oops\n`, 'mine.jsonl', tok)).toThrow(/^mine\.jsonl:2: not JSON/);
    expect(() => parseSftJsonl(`${good}\n{"format": "x"}\n`, 'mine.jsonl', tok)).toThrow(/^mine\.jsonl:2: field format/);

    // Another template's ids: the prompt differs from this model's rendering.
    const other = simulateTrajectory(tok, { ...toolConversation() });
    other.turns[1]!.prompt_token_ids = [...other.turns[1]!.prompt_token_ids!.slice(0, 5), 1, ...other.turns[1]!.prompt_token_ids!.slice(5)];
    expect(() => parseSftJsonl(`${good}\n${good}\n${JSON.stringify(other)}\n`, 'mine.jsonl', tok))
      .toThrow(/^mine\.jsonl:3: turns\[1\]\.prompt_token_ids differ from this model's chat template rendering .* at token 5/);

    // Masks that cover no token: no assistant reply at all, or only empty ones.
    const noReply = { ...JSON.parse(good), turns: [], messages: [{ role: 'user', content: 'hi' }, { role: 'tool', content: 'x', tool_call_id: 'c' }] };
    expect(() => parseSftJsonl(`${JSON.stringify(noReply)}\n`, 'mine.jsonl', tok)).toThrow(/^mine\.jsonl:1: .*loss mask would cover nothing/);
    const emptyTurns = simulateTrajectory(tok, { ...toolConversation() });
    for (const t of emptyTurns.turns) t.completion_token_ids = [];
    expect(() => parseSftJsonl(`${JSON.stringify(emptyTurns)}\n`, 'mine.jsonl', tok)).toThrow(/^mine\.jsonl:1: the loss mask covers no token/);
    expect(() => parseSftJsonl('\n', 'empty.jsonl', tok)).toThrow(/^empty\.jsonl: no trajectories/);
  });

  test('the SFT batch: the masks of its trajectories, advantages and logprobs 0, sources recorded', () => {
    const items = [0, 1].map((i) => ({ trajectory: demo(tok), where: `d.jsonl:${i + 1}` }));
    const b = buildSftBatch(items, tok, { seqLen: 4096, runId: 'r', step: 0 });
    const seg = sftSegments(items[0]!.trajectory, tok, 'x')[0]!;
    const trainable = seg.mask.reduce((a, m) => a + m, 0);
    expect(b.stats).toMatchObject({ trajectories: 2, samples: 2, trainable_tokens: 2 * trainable, sources: ['d.jsonl:1', 'd.jsonl:2'] });
    expect(Array.from(b.tensors.advantages!.data as Float32Array).every((x) => x === 0)).toBe(true);
    expect(Array.from(b.tensors.inference_logprobs!.data as Float32Array).every((x) => x === 0)).toBe(true);
    expect(Array.from(b.tensors.loss_mask!.data as Uint8Array).slice(0, seg.mask.length)).toEqual(seg.mask);
    // Cut at seq_len: the tail carries no loss, and a sample left with none is refused with the sources named.
    expect(() => buildSftBatch(items, tok, { seqLen: 8, runId: 'r', step: 2 })).toThrow(/SFT step 2 of run r: no trajectory keeps a trainable token .*d\.jsonl:1/);
  });
});
