/**
 * The buildBatch activity over a real LocalArtifactStore in a temp dir: refs and
 * summary out, files at the contract's keys, idempotent bytes, and non-retryable
 * failures named by cause.
 */
import { mkdtempSync, rmSync, writeFileSync, readFileSync, cpSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { BatchActivities } from '../../../src/contracts';
import { createBatchActivities } from '../../../src/activities/buildBatch';
import { LocalArtifactStore, uriToPath } from '../../../src/artifacts/store';
import type { RolloutSummary, Trajectory } from '../../../src/contracts/trajectory';
import { readSafetensors } from '../../../src/samples/safetensors';
import { loadModelTokenizer } from '../../../src/samples/tokenizer';
import { QWEN3_DIR, simulateTrajectory, SMOLLM2_DIR, smolLM2Available, toolConversation } from '../../fixtures/samples/simulate';

const ORCH = {
  seq_len: 2048, mask_truncated_completions: false, async_level: 1,
  advantage: { kind: 'grpo' as const, std_normalize: true, drop_uniform_groups: false },
  non_prefix_policy: 'split' as const, allow_retokenize: false,
};

async function failureOf(p: Promise<unknown>): Promise<ApplicationFailure> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(ApplicationFailure);
    return err as ApplicationFailure;
  }
  throw new Error('expected the activity to fail');
}

(smolLM2Available() ? describe : describe.skip)('buildBatch activity (SmolLM2 model dir)', () => {
  let root: string;
  let store: LocalArtifactStore;
  const tok = () => loadModelTokenizer(SMOLLM2_DIR);
  beforeEach(() => {
    root = mkdtempSync(path.join(tmpdir(), 'ratchet-batch-'));
    store = new LocalArtifactStore(root);
  });
  afterEach(() => rmSync(root, { recursive: true, force: true }));

  async function summaries(trajs: Trajectory[]): Promise<RolloutSummary[]> {
    return Promise.all(trajs.map(async (t) => ({
      task_id: t.task_id, group_id: t.group_id, rollout_index: t.rollout_index,
      trajectory: await store.putJson(`runs/r1/steps/0/rollouts/${t.group_id}-${t.rollout_index}.json`, t),
      reward: t.reward!.total, components: t.reward!.components, stop_reason: t.stop_reason, policy_version: 0,
      completion_tokens: 0, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
    })));
  }
  const group = () => [0, 1, 2, 3].map((i) => simulateTrajectory(tok(), { ...toolConversation(i === 3 ? 1 : -1), rollout_index: i, reward: i % 2, components: { correct: i % 2, bonus: 0.1 } }));

  test('writes batch.safetensors + batch.json under runs/<run>/steps/<step>/ and returns refs and a summary; a retry gives the same bytes', async () => {
    const acts = createBatchActivities({ store });
    const trajectories = await summaries(group());
    const input = { runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories, orchestrator: ORCH, modelPath: SMOLLM2_DIR };
    const out = await acts.buildBatch(input);
    expect(uriToPath(out.batch.uri)).toBe(path.join(root, 'runs/r1/steps/0/batch.safetensors'));
    expect(uriToPath(out.manifest.uri)).toBe(path.join(root, 'runs/r1/steps/0/batch.json'));
    expect(out.summary).toMatchObject({ samples: 5, rollouts: 4, mean_reward: 0.5, components_mean: { correct: 0.5, bonus: 0.1 }, non_prefix_breaks: { assistant_retokenized: 1 } });
    expect(JSON.stringify(out).length).toBeLessThan(4000); // small enough for Temporal history
    const { tensors } = readSafetensors(await store.get(out.batch));
    expect(tensors.input_ids!.data.length).toBe(out.summary.tokens);
    const manifest = await store.getJson<{ format: string; vocab_size: number; samples: unknown[] }>(out.manifest);
    expect(manifest).toMatchObject({ format: 'ratchet.batch/v1', vocab_size: 49152 });
    const again = await acts.buildBatch({ ...input, trajectories: [...trajectories].reverse() });
    expect(again.batch).toEqual(out.batch);
    expect(again.manifest).toEqual(out.manifest);
  });

  test('the manifest records the trainer\'s length normalizer from the run\'s [trainer.loss], as the workflow passes it', async () => {
    const acts = createBatchActivities({ store });
    const trajectories = await summaries(group());
    const out = await acts.buildBatch({ runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories, orchestrator: ORCH, modelPath: SMOLLM2_DIR,
      loss: { kind: 'grpo', normalization: 'dr_grpo' } });
    const manifest = await store.getJson<{ advantage: { length_normalizer: unknown } }>(out.manifest);
    expect(manifest.advantage.length_normalizer).toEqual({ kind: 'constant', value: ORCH.seq_len, per: 'trajectory' });
  });

  test('a corrupt trajectory artifact fails non-retryably naming the uri and both hashes', async () => {
    const trajectories = await summaries(group());
    const file = uriToPath(trajectories[1]!.trajectory.uri);
    writeFileSync(file, readFileSync(file, 'utf8').replace('parser', 'PARSER'));
    const f = await failureOf(createBatchActivities({ store }).buildBatch({ runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories, orchestrator: ORCH, modelPath: SMOLLM2_DIR }));
    expect(f.type).toBe('CorruptArtifact');
    expect(f.nonRetryable).toBe(true);
    expect(f.message).toContain(trajectories[1]!.trajectory.uri);
    expect(f.message).toContain(trajectories[1]!.trajectory.sha256);
  });

  test('a batch where every sample is masked fails as EmptyBatch with the causes, never an empty tensor', async () => {
    const trajectories = await summaries(group());
    const f = await failureOf(createBatchActivities({ store }).buildBatch({
      runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories, orchestrator: { ...ORCH, seq_len: 100, mask_truncated_completions: true }, modelPath: SMOLLM2_DIR,
    }));
    expect(f.type).toBe('EmptyBatch');
    expect(f.nonRetryable).toBe(true);
    expect(f.message).toMatch(/truncated_masked: 5/);
    expect(await store.exists('runs/r1/steps/0/batch.safetensors')).toBeUndefined();
  });

  test('missing token ids fail as MissingTokenIds naming the vLLM setting', async () => {
    const t = group();
    t[0]!.turns[1]!.prompt_token_ids = null;
    const f = await failureOf(createBatchActivities({ store }).buildBatch({ runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories: await summaries(t), orchestrator: ORCH, modelPath: SMOLLM2_DIR }));
    expect(f.type).toBe('MissingTokenIds');
    expect(f.message).toMatch(/turns\[1\]\.prompt_token_ids is null.*return_token_ids/);
  });

  test('rollouts sampled from another model (ids beyond the vocabulary) fail as TokenOutOfVocab', async () => {
    const qwen = loadModelTokenizer(QWEN3_DIR);
    const t = simulateTrajectory(qwen, { start: [{ role: 'user', content: '你好' }], turns: [{ reply: { role: 'assistant', content: '你好！' } }] });
    const f = await failureOf(createBatchActivities({ store }).buildBatch({ runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories: await summaries([t]), orchestrator: ORCH, modelPath: SMOLLM2_DIR }));
    expect(f.type).toBe('TokenOutOfVocab');
  });

  test('a tokenizer larger than the model\'s config vocab_size is a mismatch', async () => {
    const dir = path.join(root, 'mismatched-model');
    mkdirSync(dir);
    cpSync(path.join(QWEN3_DIR, 'tokenizer.json'), path.join(dir, 'tokenizer.json'));
    cpSync(path.join(QWEN3_DIR, 'tokenizer_config.json'), path.join(dir, 'tokenizer_config.json'));
    cpSync(path.join(SMOLLM2_DIR, 'config.json'), path.join(dir, 'config.json'));
    const f = await failureOf(createBatchActivities({ store }).buildBatch({ runId: 'r1', step: 0, trainerPolicyVersion: 0, trajectories: [], orchestrator: ORCH, modelPath: dir }));
    expect(f.type).toBe('TokenizerModelMismatch');
    expect(f.message).toMatch(/says vocab_size 49152: the tokenizer does not belong to this model/);
  });
});

// Compile-time check: the activity fits the contract TrainRun calls (src/contracts).
test('createBatchActivities implements the workflow\'s BatchActivities', () => {
  const acts: BatchActivities = createBatchActivities({ store: new LocalArtifactStore('/nonexistent') });
  expect(typeof acts.buildBatch).toBe('function');
});
