/**
 * SFT data through the real trainer: demonstrations (conversations without token ids) are
 * frozen and batched by SftRun's own activities with SmolLM2's template, then the real
 * Python trainer core with loss.kind = "sft" puts gradient on exactly the policy's tokens
 * and lowers the batch's NLL in two steps. Needs the model and the trainer virtualenv,
 * not the stack; skips loudly without them.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { createSftActivities } from '../../src/activities/sft';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { loadModelTokenizer } from '../../src/samples/tokenizer';
import { simulateTrajectory, SMOLLM2_DIR, toolConversation } from '../fixtures/samples/simulate';
import { describeWithStack, REPO, STATE } from '../helpers/stack';

const PYTHON = path.join(STATE, 'venvs', 'trainer', 'bin', 'python');

// A real model on the CPU: minutes when the machine is shared.
jest.setTimeout(1_500_000);

describeWithStack('SFT batch -> Python trainer', ['model', 'trainerVenv'], () => {
  let root: string;
  beforeAll(() => { root = mkdtempSync(path.join(tmpdir(), 'ratchet-sft2t-')); });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  test('gradient on exactly the policy\'s tokens, and SFT steps lower the NLL', async () => {
    const tok = loadModelTokenizer(SMOLLM2_DIR);
    const demos = [0, 1].map((i) => ({ ...simulateTrajectory(tok, { ...toolConversation(), task_id: `t${i}`, group_id: `g${i}` }), turns: [] }));
    const data = path.join(root, 'demos.jsonl');
    writeFileSync(data, demos.map((d) => JSON.stringify(d)).join('\n') + '\n');
    const acts = createSftActivities({ store: new LocalArtifactStore(path.join(root, 'art')) });
    const prepared = await acts.prepareSftData({ runId: 'sft2t', data: [data], modelPath: SMOLLM2_DIR });
    expect(prepared).toMatchObject({ trajectories: 2, rejected: 0 });
    const seqLen = 1024;
    const out = await acts.buildSftBatch({ runId: 'sft2t', step: 0, seed: 0, batchSize: 2, data: prepared.data, modelPath: SMOLLM2_DIR, seqLen });
    // Step 1: the next epoch over the same two trajectories, so its NLL is measured after step 0's update.
    const out1 = await acts.buildSftBatch({ runId: 'sft2t', step: 1, seed: 0, batchSize: 2, data: prepared.data, modelPath: SMOLLM2_DIR, seqLen });
    const stdout = execFileSync(PYTHON, [
      path.join(REPO, 'test', 'fixtures', 'samples', 'check_sft_batch_with_trainer.py'),
      JSON.stringify(out.batch), JSON.stringify(out.manifest), JSON.stringify(out1.batch), JSON.stringify(out1.manifest), SMOLLM2_DIR, String(seqLen),
    ], { encoding: 'utf8', timeout: 1_400_000, env: { ...process.env, OMP_NUM_THREADS: '2', PYTHONPATH: path.join(REPO, 'trainer') } }); // this tree's trainer, not an installed one
    const result = JSON.parse(stdout.trim().split('\n').pop()!) as { samples: number; trainable: number; masked_checked: number; nll: number[] };
    expect(result.samples).toBe(2);
    expect(result.trainable).toBe(out.summary.trainable_tokens);
    expect(result.masked_checked).toBeGreaterThan(result.trainable);
    expect(result.nll[1]!).toBeLessThan(result.nll[0]!);
  });
});
