/**
 * A real batch, built by the TypeScript builder with SmolLM2's tokenizer and tool
 * template, taken through the real Python trainer core (ratchet_trainer): it loads
 * and validates the safetensors + manifest, the GRPO loss puts exactly zero
 * gradient on every masked position, and Trainer.step applies an optimizer step.
 * Skips loudly without the model directory or the trainer virtualenv.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { createBatchActivities } from '../../src/activities/buildBatch';
import { LocalArtifactStore } from '../../src/artifacts/store';
import type { RolloutSummary } from '../../src/contracts/trajectory';
import { loadModelTokenizer } from '../../src/samples/tokenizer';
import { simulateTrajectory, SMOLLM2_DIR, toolConversation } from '../fixtures/samples/simulate';
import { describeWithStack, REPO, STATE } from '../helpers/stack';

const PYTHON = path.join(STATE, 'venvs', 'trainer', 'bin', 'python');
describeWithStack('batch builder -> Python trainer', ['model', 'trainerVenv'], () => {
  let root: string;
  beforeAll(() => { root = mkdtempSync(path.join(tmpdir(), 'ratchet-b2t-')); });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  test('the trainer loads the batch, masked positions get exactly zero gradient, and a step applies', async () => {
    const store = new LocalArtifactStore(root);
    const tok = loadModelTokenizer(SMOLLM2_DIR);
    // Two groups; one rollout non-canonical mid-episode (split into two samples), one truncated by seq_len.
    const trajs = [0, 1, 2, 3].map((i) => simulateTrajectory(tok, {
      ...toolConversation(i === 1 ? 0 : i === 2 ? 2 : -1), group_id: `g${i >> 1}`, task_id: `t${i >> 1}`, rollout_index: i & 1, reward: i === 0 || i === 3 ? 1 : 0,
    }));
    const trajectories: RolloutSummary[] = await Promise.all(trajs.map(async (t) => ({
      task_id: t.task_id, group_id: t.group_id, rollout_index: t.rollout_index,
      trajectory: await store.putJson(`runs/b2t/steps/0/rollouts/${t.group_id}-${t.rollout_index}.json`, t),
      reward: t.reward!.total, components: t.reward!.components, stop_reason: t.stop_reason, policy_version: 0,
      completion_tokens: 0, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
    })));
    const seqLen = 600;
    const out = await createBatchActivities({ store }).buildBatch({
      runId: 'b2t', step: 0, trainerPolicyVersion: 0, trajectories, modelPath: SMOLLM2_DIR,
      orchestrator: {
        seq_len: seqLen, mask_truncated_completions: false, async_level: 0, non_prefix_policy: 'split', allow_retokenize: false,
        advantage: { kind: 'grpo', std_normalize: true, drop_uniform_groups: false },
      },
    });
    expect(out.summary.samples).toBe(5);
    const stdout = execFileSync(PYTHON, [
      path.join(REPO, 'test', 'fixtures', 'samples', 'check_batch_with_trainer.py'),
      JSON.stringify(out.batch), JSON.stringify(out.manifest), SMOLLM2_DIR, String(seqLen),
    ], { encoding: 'utf8', timeout: 540_000, env: { ...process.env, OMP_NUM_THREADS: '2' } });
    const result = JSON.parse(stdout.trim().split('\n').pop()!) as Record<string, number | boolean>;
    expect(result).toMatchObject({ samples: 5, tokens: out.summary.tokens, trainable: out.summary.trainable_tokens, step_tokens: out.summary.trainable_tokens, applied: true });
    expect(result.masked_checked as number).toBeGreaterThan(1000);
    expect(result.live_checked as number).toBeGreaterThan(100);
    expect(Number.isFinite(result.grad_norm as number)).toBe(true);
  });
});
