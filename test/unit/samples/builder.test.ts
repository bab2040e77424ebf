/**
 * The builder end to end in memory: groups, advantages, staleness, truncation,
 * drops by cause, packing, determinism, missing ids. Qwen3's tokenizer with
 * single-turn episodes (which its template keeps prefix-stable); SmolLM2's for
 * multi-turn ones.
 */
import { buildBatchFromTrajectories, type BuilderConfig, type BuilderInput } from '../../../src/samples/builder';
import { BatchBuildError } from '../../../src/samples/errors';
import { loadModelTokenizer, type ModelTokenizer } from '../../../src/samples/tokenizer';
import type { Trajectory } from '../../../src/contracts/trajectory';
import { writeSafetensors } from '../../../src/samples/safetensors';
import { QWEN3_DIR, simulateTrajectory, SMOLLM2_DIR, smolLM2Available, toolConversation } from '../../fixtures/samples/simulate';

const CFG: BuilderConfig = {
  seq_len: 4096, mask_truncated_completions: false, async_level: 1,
  advantage: { kind: 'grpo', std_normalize: false, drop_uniform_groups: false },
  non_prefix_policy: 'split', allow_retokenize: false,
};
const CTX = { runId: 'r', step: 3, trainerPolicyVersion: 3, modelName: 'm' };

function single(tok: ModelTokenizer, o: { group?: string; idx?: number; reward?: number; version?: number; reply?: string; finish?: Trajectory['turns'][number]['finish_reason'] }): Trajectory {
  return simulateTrajectory(tok, {
    start: [{ role: 'user', content: `Task for ${o.group ?? 'g0'}: which file defines parse?` }],
    turns: [{ reply: { role: 'assistant', content: o.reply ?? 'src/pkg/parser.py defines parse.' }, policy_version: o.version ?? 3, finish_reason: o.finish, noEos: o.finish === 'length' }],
    group_id: o.group ?? 'g0', task_id: o.group ?? 'g0', rollout_index: o.idx ?? 0, reward: o.reward ?? 1,
  });
}
const inp = (t: Trajectory, i = 0): BuilderInput => ({ trajectory: t, label: `file:///t${t.group_id}-${t.rollout_index}-${i}.json`, sha256: `${t.group_id}${t.rollout_index}${i}`.padEnd(64, '0') });

describe('batch builder (Qwen3 tokenizer, single-turn episodes)', () => {
  let tok: ModelTokenizer;
  beforeAll(() => { tok = loadModelTokenizer(QWEN3_DIR); });

  test('packs samples back to back: positions restart, offsets, advantages and logprobs only where trainable', () => {
    const ts = [single(tok, { idx: 0, reward: 1 }), single(tok, { idx: 1, reward: 0, reply: 'Probably cli.py.' })];
    const { tensors, manifest, stats } = buildBatchFromTrajectories(ts.map((t) => inp(t)), CFG, tok, CTX);
    const ids = tensors.input_ids!.data as Int32Array;
    const pos = tensors.position_ids!.data as Int32Array;
    const mask = tensors.loss_mask!.data as Uint8Array;
    const adv = tensors.advantages!.data as Float32Array;
    const lp = tensors.inference_logprobs!.data as Float32Array;
    const off = Array.from(tensors.sample_offsets!.data as BigInt64Array, Number);
    const lens = ts.map((t) => t.turns[0]!.prompt_token_ids!.length + t.turns[0]!.completion_token_ids!.length);
    expect(off).toEqual([0, lens[0], lens[0]! + lens[1]!]);
    expect(pos[0]).toBe(0);
    expect(pos[lens[0]!]).toBe(0);
    expect(pos[lens[0]! - 1]).toBe(lens[0]! - 1);
    expect(Array.from(ids.subarray(0, lens[0]))).toEqual([...ts[0]!.turns[0]!.prompt_token_ids!, ...ts[0]!.turns[0]!.completion_token_ids!]);
    for (let t = 0; t < ids.length; t++) {
      if (!mask[t]) { expect(adv[t]).toBe(0); expect(lp[t]).toBe(0); }
    }
    expect(mask[0]).toBe(0);
    expect(adv[lens[0]! - 1]).toBeCloseTo(0.5);
    expect(adv[ids.length - 1]).toBeCloseTo(-0.5);
    expect(stats).toMatchObject({ samples: 2, rollouts: 2, uniform_groups: 0, mean_reward: 0.5, components_mean: { correct: 0.5 } });
    expect(stats.trainable_tokens).toBe(ts.reduce((a, t) => a + t.turns[0]!.completion_token_ids!.length, 0));
    expect(manifest).toMatchObject({ format: 'ratchet.batch/v1', run_id: 'r', step: 3, vocab_size: 151669, seq_len: 4096, num_samples: 2 });
    expect(manifest.samples[1]).toMatchObject({ offset: lens[0], group_id: 'g0', rollout_index: 1, reward: 0, advantage: -0.5, staleness: 0, policy_version: 3 });
  });

  test('an infrastructure failure is dropped and never enters its group\'s baseline', () => {
    const ok = [single(tok, { idx: 0, reward: 1 }), single(tok, { idx: 1, reward: 0 })];
    const lost = { ...single(tok, { idx: 2, reward: -1 }), stop_reason: 'infra_error' as const };
    const with_ = buildBatchFromTrajectories([...ok, lost].map((t) => inp(t)), CFG, tok, CTX);
    const without = buildBatchFromTrajectories(ok.map((t) => inp(t)), CFG, tok, CTX);
    expect(with_.stats.dropped.infrastructure).toBe(1);
    expect(with_.manifest.samples.map((s) => s.advantage)).toEqual(without.manifest.samples.map((s) => s.advantage));
    expect(with_.manifest.samples.map((s) => s.advantage)).toEqual([0.5, -0.5]);
    expect(with_.stats.mean_reward).toBe(0.5);
    expect(with_.manifest.num_trajectories).toBe(2);
  });

  test('a task that could not be set up is dropped (task_setup) and never enters its group\'s baseline', () => {
    const ok = [single(tok, { idx: 0, reward: 1 }), single(tok, { idx: 1, reward: 0 })];
    // As the rollout activity records it: no turns, zero reward, the error kept.
    const unset = { ...single(tok, { idx: 2, reward: 0 }), stop_reason: 'setup_error' as const, turns: [], messages: [], error: 'base commit not in snapshot' };
    const with_ = buildBatchFromTrajectories([...ok, unset].map((t) => inp(t)), CFG, tok, CTX);
    const without = buildBatchFromTrajectories(ok.map((t) => inp(t)), CFG, tok, CTX);
    expect(with_.stats.dropped.task_setup).toBe(1);
    expect(with_.stats.dropped.infrastructure).toBe(0);
    expect(with_.manifest.dropped.task_setup).toBe(1);
    // A zero reward in the baseline would make it 1/3, not 1/2.
    expect(with_.manifest.samples.map((s) => s.advantage)).toEqual(without.manifest.samples.map((s) => s.advantage));
    expect(with_.manifest.samples.map((s) => s.advantage)).toEqual([0.5, -0.5]);
    expect(with_.stats.mean_reward).toBe(0.5);
    expect(with_.manifest.rollouts).toBe(3);
    expect(with_.manifest.num_trajectories).toBe(2);
  });

  test('limit_ended = "mask" zeroes exactly the limit-ended episodes\' tokens and leaves them out of the baseline', () => {
    const ts = [
      single(tok, { group: 'g0', idx: 0, reward: 1 }),
      single(tok, { group: 'g0', idx: 1, reward: 0, reply: 'Probably cli.py.' }),
      { ...single(tok, { group: 'g0', idx: 2, reward: -0.5, reply: 'Still searching the tree.' }), stop_reason: 'max_turns' as const },
      { ...single(tok, { group: 'g0', idx: 3, reward: -0.5, reply: 'Out of room.' }), stop_reason: 'context_length' as const },
      single(tok, { group: 'g1', idx: 0, reward: 1 }),
      { ...single(tok, { group: 'g1', idx: 1, reward: 0 }), stop_reason: 'max_tool_calls' as const },
    ];
    const limitEnded = new Set(['g0/2', 'g0/3', 'g1/1']);
    const key = (s: { group_id: string; rollout_index: number }) => `${s.group_id}/${s.rollout_index}`;
    const scored = buildBatchFromTrajectories(ts.map((t) => inp(t)), CFG, tok, CTX);
    const masked = buildBatchFromTrajectories(ts.map((t) => inp(t)), { ...CFG, limit_ended: 'mask' }, tok, CTX);

    // Scored: every episode trains; the group mean of g0 is (1 + 0 - 0.5 - 0.5) / 4 = 0.
    expect(scored.manifest.samples.map((s) => [key(s), s.advantage])).toEqual([['g0/0', 1], ['g0/1', 0], ['g0/2', -0.5], ['g0/3', -0.5], ['g1/0', 0.5], ['g1/1', -0.5]]);
    // Masked: the limit-ended episodes have no sample; g0's baseline is the mean of its two finished ones,
    // and g1 is left with one member, which carries no signal.
    expect(masked.manifest.samples.map((s) => [key(s), s.advantage])).toEqual([['g0/0', 0.5], ['g0/1', -0.5], ['g1/0', 0]]);
    expect(masked.stats.dropped.limit_ended).toBe(3);
    expect(scored.stats.dropped.limit_ended).toBe(0);
    expect(masked.manifest.limit_ended).toBe('mask');
    expect(masked.stats.informative_groups).toBe(1);
    expect(scored.stats.informative_groups).toBe(2);

    // Exactly their tokens: the trainable tokens lost are the limit-ended episodes' completions, counted from the trajectories.
    const completion = (t: Trajectory) => t.turns.reduce((a, turn) => a + turn.completion_token_ids!.length, 0);
    const lost = ts.filter((t) => limitEnded.has(key(t))).reduce((a, t) => a + completion(t), 0);
    expect(scored.stats.trainable_tokens - masked.stats.trainable_tokens).toBe(lost);
    // Every other episode keeps its tokens and its loss mask bit for bit.
    const maskOf = (b: typeof scored, k: string) => {
      const j = b.manifest.samples.findIndex((s) => key(s) === k);
      const s = b.manifest.samples[j]!;
      return Array.from((b.tensors.loss_mask!.data as Uint8Array).subarray(s.offset, s.offset + s.tokens));
    };
    for (const t of ts.filter((t) => !limitEnded.has(key(t)))) expect(maskOf(masked, key(t))).toEqual(maskOf(scored, key(t)));
    // The step's score still counts them: they were scored, only not trained on.
    expect(masked.stats.mean_reward).toBeCloseTo(scored.stats.mean_reward, 12);
    expect(masked.stats.mean_reward).toBeCloseTo((1 + 0 - 0.5 - 0.5 + 1 + 0) / 6, 12);
  });

  test('same trajectories in any order give the same bytes', () => {
    const ts = [0, 1, 2, 3].map((i) => single(tok, { group: `g${i % 2}`, idx: i, reward: i * 0.25 }));
    const a = buildBatchFromTrajectories(ts.map((t) => inp(t)), CFG, tok, CTX);
    const b = buildBatchFromTrajectories([...ts].reverse().map((t) => inp(t)), CFG, tok, CTX);
    expect(writeSafetensors(a.tensors).equals(writeSafetensors(b.tensors))).toBe(true);
    expect(JSON.stringify(a.manifest)).toBe(JSON.stringify(b.manifest));
  });

  test('staleness: within async_level kept and recorded, beyond it dropped and counted; a future policy is an error', () => {
    const ts = [single(tok, { idx: 0, version: 3 }), single(tok, { idx: 1, version: 2, reward: 0 }), single(tok, { idx: 2, version: 1 })];
    const { stats, manifest } = buildBatchFromTrajectories(ts.map((t) => inp(t)), CFG, tok, CTX);
    expect(stats.dropped.stale).toBe(1);
    expect(manifest.samples.map((s) => [s.rollout_index, s.staleness])).toEqual([[0, 0], [1, 1]]);
    expect(stats.max_staleness).toBe(1);
    expect(() => buildBatchFromTrajectories([inp(single(tok, { version: 4 }))], CFG, tok, CTX)).toThrow(/policy version 4, newer than the trainer's 3/);
  });

  test.each([
    [false, 0, 2],
    [true, 2, 0],
  ])('uniform groups with drop_uniform_groups=%s: %i dropped, %i kept with zero advantage', (drop, dropped, kept) => {
    const ts = [single(tok, { idx: 0, reward: 0.5 }), single(tok, { idx: 1, reward: 0.5 })];
    const cfg = { ...CFG, advantage: { ...CFG.advantage, drop_uniform_groups: drop } };
    const { stats, tensors } = buildBatchFromTrajectories(ts.map((t) => inp(t)), cfg, tok, CTX);
    expect(stats.uniform_groups).toBe(1);
    expect(stats.dropped.uniform_group).toBe(dropped);
    expect(stats.samples).toBe(kept);
    expect(Array.from(tensors.advantages!.data as Float32Array).every((x) => x === 0)).toBe(true);
  });

  test('truncation: cut at seq_len, trainable tokens kept unless mask_truncated_completions', () => {
    const t = single(tok, { reply: 'word '.repeat(60) });
    const promptLen = t.turns[0]!.prompt_token_ids!.length;
    const cfg = { ...CFG, seq_len: promptLen + 10 };
    const kept = buildBatchFromTrajectories([inp(t)], cfg, tok, CTX);
    expect(kept.stats).toMatchObject({ samples: 1, tokens: promptLen + 10, trainable_tokens: 10, truncated_samples: 1 });
    expect(kept.manifest.samples[0]!.truncated).toBe(true);
    const masked = buildBatchFromTrajectories([inp(t)], { ...cfg, mask_truncated_completions: true }, tok, CTX);
    expect(masked.stats).toMatchObject({ samples: 0, trainable_tokens: 0, dropped: { truncated_masked: 1 } });
  });

  test('finish_reason "length" zeroes the mask only under mask_truncated_completions; a prompt longer than seq_len leaves nothing', () => {
    const t = single(tok, { finish: 'length' });
    expect(buildBatchFromTrajectories([inp(t)], CFG, tok, CTX).stats.samples).toBe(1);
    expect(buildBatchFromTrajectories([inp(t)], { ...CFG, mask_truncated_completions: true }, tok, CTX).stats.dropped.truncated_masked).toBe(1);
    const short = buildBatchFromTrajectories([inp(t)], { ...CFG, seq_len: 5 }, tok, CTX);
    expect(short.stats).toMatchObject({ samples: 0, dropped: { no_trainable_tokens: 1 } });
  });

  test('a rollout without a reward is dropped and counted', () => {
    const t = single(tok, {});
    delete t.reward;
    expect(buildBatchFromTrajectories([inp(t)], CFG, tok, CTX).stats.dropped.missing_reward).toBe(1);
    // A reward that came with the RolloutSummary counts.
    expect(buildBatchFromTrajectories([{ ...inp(t), reward: { total: 1, components: {} } }], CFG, tok, CTX).stats.samples).toBe(1);
  });

  test('missing token ids: rejected naming the server setting, or re-tokenized (flagged) when allowed', () => {
    const t = single(tok, {});
    const server = t.turns[0]!;
    // A server that returns no ids still returns each logprob's token text (OpenAI's logprobs.content[].token).
    t.turns[0] = { ...server, prompt_token_ids: null, completion_token_ids: null, completion_logprob_tokens: server.completion_token_ids!.map((id) => tok.decode([id])) };
    try {
      buildBatchFromTrajectories([inp(t)], CFG, tok, CTX);
      throw new Error('expected MissingTokenIds');
    } catch (err) {
      expect((err as BatchBuildError).code).toBe('MissingTokenIds');
      expect((err as Error).message).toMatch(/turns\[0\]\.prompt_token_ids, completion_token_ids are null.*"return_token_ids": true.*"logprobs": true.*allow_retokenize/);
    }
    const { manifest, stats } = buildBatchFromTrajectories([inp(t)], { ...CFG, allow_retokenize: true }, tok, CTX);
    expect(stats.retokenized_rollouts).toBe(1);
    expect(manifest.samples[0]!.retokenized).toBe(true);
    expect(manifest.samples[0]!.tokens).toBe(server.prompt_token_ids!.length + server.completion_token_ids!.length);
    // Without logprobs nothing can be recovered.
    t.turns[0] = { ...server, completion_logprobs: null };
    expect(() => buildBatchFromTrajectories([inp(t)], { ...CFG, allow_retokenize: true }, tok, CTX)).toThrow(/completion_logprobs is null.*never recomputed/);
  });
});

(smolLM2Available() ? describe : describe.skip)('batch builder (SmolLM2, multi-turn)', () => {
  let tok: ModelTokenizer;
  beforeAll(() => { tok = loadModelTokenizer(SMOLLM2_DIR); });

  test('a split trajectory gives one sample per consistent run of turns, staleness from each run\'s oldest turn', () => {
    const conv = toolConversation(0);
    conv.turns[0]!.policy_version = 2;
    conv.turns[1]!.policy_version = 3;
    conv.turns[2]!.policy_version = 3;
    const t = simulateTrajectory(tok, { ...conv, reward: 1 });
    const convU = toolConversation();
    for (const st of convU.turns) st.policy_version = 3;
    const u = simulateTrajectory(tok, { ...convU, rollout_index: 1, reward: 0 });
    const { manifest, stats, tensors } = buildBatchFromTrajectories([inp(t), inp(u)], CFG, tok, CTX);
    expect(stats.non_prefix_breaks.assistant_retokenized).toBe(1);
    // The trainer weighs trajectories: both segments of rollout 0 carry its index.
    expect(manifest.samples.map((s) => s.trajectory)).toEqual([0, 0, 1]);
    expect(Array.from(tensors.trajectory_index!.data as BigInt64Array, Number)).toEqual([0, 0, 1]);
    expect(manifest.num_trajectories).toBe(2);
    expect(manifest.samples.map((s) => [s.rollout_index, s.turns, s.staleness, s.advantage])).toEqual([
      [0, [0, 0], 1, 0.5], [0, [1, 2], 0, 0.5], [1, [0, 2], 0, -0.5],
    ]);
    expect(manifest.vocab_size).toBe(49152);
    expect(() => buildBatchFromTrajectories([inp(t)], { ...CFG, non_prefix_policy: 'fail' }, tok, CTX)).toThrow(/turn 1's prompt_token_ids do not extend/);
  });
});
