/**
 * `ratchet replay-step` (src/cli/replayStep.ts): which checkpoint a step's update started from, the
 * request it sends the trainer, the text it prints; and, with the trainer's venv, the whole path on a
 * tiny CPU run: records -> request -> python -m ratchet_trainer.replay -> the same adapter sha256.
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { buildProgram } from '../../../src/cli';
import { CliError, EXIT } from '../../../src/cli/exit';
import { parentCheckpoint, replayRequest, replayText, runReplays } from '../../../src/cli/replayStep';
import { StepRecord } from '../../../src/contracts/records';
import { appendStepRecord, readStepRecords } from '../../../src/records/runRecords';
import { paths, REPO_ROOT } from '../../../src/shared/paths';

const ref = (name: string, sha: string) => ({ uri: `file:///a/${name}`, sha256: sha.repeat(64).slice(0, 64), bytes: 1 });

function lineage(step: number, parent?: string, adapter?: string, lr = 1e-5) {
  return {
    config_sha256: 'c', model: { path: 'm', served_model: 's' }, tasks: { task_set_dir: '/t', seed: 1, rows: [] },
    envs: [], sampling: {}, rollout_policy_versions: {},
    trainer: { seed: 0, step, learning_rate: lr, loss: 'grpo', ...(parent ? { parent_checkpoint_sha256: parent } : {}), ...(adapter ? { adapter_sha256: adapter } : {}) },
  };
}

function record(step: number, extra: Record<string, unknown>) {
  return StepRecord.parse({ format: 'ratchet.step/v1', run_id: 'r', step, time: '2026-11-25T10:00:00Z', policy_version: step + 1, mean_reward: 0, ...extra });
}

// Step 0 trained from the initial adapter, step 1 skipped (the checkpoint carried on), step 2 trained from step 0's.
const c0 = ref('ck0', '0'), a0 = ref('ad0', 'a'), c2 = ref('ck2', '2'), a2 = ref('ad2', 'b');
const batch = (n: number) => ({ batch: ref(`b${n}`, 'e'), manifest: ref(`m${n}`, 'f'), summary: {} });
const records = [
  record(0, { batch: batch(0), checkpoint: c0, adapter: a0, trainer: { loss: 0.1 }, lineage: lineage(0, undefined, a0.sha256) }),
  record(1, { checkpoint: c0, adapter: a0, trainer: { skipped: true }, error: { type: 'EmptyBatch', message: 'no trainable token' }, lineage: lineage(1, c0.sha256) }),
  record(2, { batch: batch(2), checkpoint: c2, adapter: a2, trainer: { loss: 0.2 }, lineage: lineage(2, c0.sha256, a2.sha256, 2e-5) }),
];

test('each trained step replays from the checkpoint its lineage names, with the step\'s learning rate', () => {
  expect(replayRequest(records, 0)).toEqual({ run_id: 'r', step: 0, batch: batch(0).batch, manifest: batch(0).manifest, checkpoint: c0, adapter: a0, parent_checkpoint: null, lr: 1e-5 });
  const r2 = replayRequest(records, 2, { tolerance: 1e-3, device: 'cuda', store: { url: 's3://b/p' } });
  expect(r2.parent_checkpoint).toEqual(c0);
  expect(r2).toMatchObject({ adapter: a2, checkpoint: c2, lr: 2e-5, tolerance: 1e-3, device: 'cuda', store: { url: 's3://b/p' } });
  // The trainer's reported thread count is the default; --threads wins.
  const withCode = [{ ...records[0]!, lineage: { ...records[0]!.lineage!, trainer: { ...records[0]!.lineage!.trainer, code: { version: '0.1.0', sha256: 'd', threads: 6 } } } }];
  expect(replayRequest(withCode, 0).threads).toBe(6);
  expect(replayRequest(withCode, 0, { threads: 2 }).threads).toBe(2);
  expect(replayRequest(records, 0).threads).toBeUndefined();
  // Records from before lineage: the newest earlier checkpoint (the skipped step carried c0 on).
  const bare = records.map((r) => ({ ...r, lineage: undefined }));
  expect(parentCheckpoint(bare, bare[2]!)).toEqual(c0);
  expect(parentCheckpoint(bare, bare[0]!)).toBeNull();
});

test('a step with nothing to replay, an unknown step or parent, an inconsistent record: clear errors with their exit codes', () => {
  const err = (fn: () => unknown) => { try { fn(); } catch (e) { return e as CliError; } throw new Error('no error'); };
  expect(err(() => replayRequest(records, 1))).toMatchObject({ code: EXIT.notReady, message: expect.stringMatching(/step 1 trained nothing.*EmptyBatch/) });
  expect(err(() => replayRequest(records, 7))).toMatchObject({ code: EXIT.notFound, message: expect.stringMatching(/no recorded step 7 \(recorded: 0, 1, 2\)/) });
  const orphan = [records[0]!, { ...records[2]!, lineage: lineage(2, '9'.repeat(64)) }];
  expect(err(() => replayRequest(orphan, 2))).toMatchObject({ code: EXIT.notFound, message: expect.stringContaining('9'.repeat(64)) });
  const odd = [{ ...records[0]!, lineage: lineage(0, undefined, '7'.repeat(64)) }];
  expect(err(() => replayRequest(odd, 0))).toMatchObject({ code: EXIT.invalidInput, message: expect.stringMatching(/inconsistent/) });
});

test('the text names the verdict and both hashes', () => {
  const base = { run_id: 'r', step: 3, recorded_adapter_sha256: 'a'.repeat(64), parent_checkpoint: null, device: 'cpu', threads: 2 };
  const same = replayText({ ...base, adapter_sha256: 'a'.repeat(64), match: true, passed: true, max_abs_diff: 0, max_rel_diff: 0 });
  expect(same).toMatch(/step 3: .*reproduced.*from the initial adapter/);
  const off = replayText({ ...base, adapter_sha256: 'b'.repeat(64), match: false, passed: false, max_abs_diff: 0.5, max_rel_diff: 0.01 });
  expect(off).toMatch(/MISMATCH/);
  expect(off).toContain(`recorded adapter sha256 ${'a'.repeat(64)}`);
  expect(off).toContain(`replayed adapter sha256 ${'b'.repeat(64)} max |Δ| 5.00e-1 (relative 1.00e-2)`);
  expect(replayText({ ...base, adapter_sha256: 'b'.repeat(64), match: false, passed: true, tolerance: 0.1, max_abs_diff: 0.5, max_rel_diff: 0.01 })).toMatch(/within tolerance 0.1/);
  expect(replayText({ ...base, adapter_sha256: 'b'.repeat(64), match: false, passed: true, same_contents: true, max_abs_diff: 0, max_rel_diff: 0 })).toMatch(/contents reproduced bit for bit.*before 0.7/);
});

test('bad flags are usage errors before anything is read', async () => {
  for (const args of [['r', '1', '--tolerance', '-1'], ['r', 'x'], ['r', '1', '--device', 'tpu']]) {
    const program = buildProgram();
    const run = program.parseAsync(['node', 'ratchet', 'replay-step', ...args]);
    await expect(run).rejects.toMatchObject({ code: EXIT.usage });
  }
});

// The whole path on a tiny CPU run trained by the worker's own commands.
const PYTHON = path.join(paths.venv('trainer'), 'bin', 'python');
const havePython = existsSync(PYTHON);
if (!havePython) console.warn(`SKIPPING the replay-step end-to-end test: no trainer venv at ${PYTHON}. Fix: bash infra/trainer-env.sh`);
(havePython ? test : test.skip)('a finished CPU run: every step replays to its recorded adapter sha256; a record naming another adapter fails with both hashes', async () => {
  const root = mkdtempSync(path.join(os.tmpdir(), 'ratchet-replay-'));
  try {
    const made = spawnSync(PYTHON, ['tests/replay_run.py', root, 'tiny', '2'], { cwd: path.join(REPO_ROOT, 'trainer'), encoding: 'utf8', timeout: 240_000 });
    if (made.status !== 0) throw new Error(`replay_run.py failed: ${made.stderr}`);
    const steps = JSON.parse(made.stdout.trim().split('\n').pop()!) as { step: number; batch: never; manifest: never; checkpoint: { sha256: string }; adapter: { sha256: string }; lr: number; seed: number }[];
    expect(new Set(steps.map((s) => s.adapter.sha256)).size).toBe(2);
    const store = new LocalArtifactStore(root);
    for (const s of steps) {
      await appendStepRecord(store, StepRecord.parse({
        format: 'ratchet.step/v1', run_id: 'tiny', step: s.step, time: '2026-11-25T10:00:00Z', policy_version: s.step + 1, mean_reward: 0,
        trainer: { loss: 0 }, batch: { batch: s.batch, manifest: s.manifest, summary: {} }, checkpoint: s.checkpoint, adapter: s.adapter,
        lineage: { ...lineage(s.step, s.step > 0 ? steps[s.step - 1]!.checkpoint.sha256 : undefined, s.adapter.sha256, s.lr), trainer: { seed: s.seed, step: s.step, learning_rate: s.lr, loss: 'grpo', ...(s.step > 0 ? { parent_checkpoint_sha256: steps[s.step - 1]!.checkpoint.sha256 } : {}), adapter_sha256: s.adapter.sha256 } },
      }));
    }
    const recs = await readStepRecords(store, 'tiny');
    // Step 1's record naming step 0's adapter: the replay produces step 1's real one, which is not it.
    const forged = recs.map((r) => (r.step === 1 ? { ...r, adapter: steps[0]!.adapter as never, lineage: undefined } : r));
    // One trainer process replays every step and the forged one in turn (as `replay-step all` does): each replay's
    // result must not depend on what the process replayed before it.
    const streamed: number[] = [];
    const all = await runReplays([...steps.map((s) => replayRequest(recs, s.step)), replayRequest(forged, 1)], (x) => streamed.push(x.step));
    expect(streamed).toEqual([...steps.map((s) => s.step), 1]);
    const replayed = all.slice(0, steps.length), r = all[steps.length]!;
    for (const [i, s] of steps.entries()) {
      expect(replayed[i]).toMatchObject({ step: s.step, match: true, passed: true, adapter_sha256: s.adapter.sha256, max_abs_diff: 0 });
    }
    expect(r).toMatchObject({ match: false, passed: false, same_tensors: false, recorded_adapter_sha256: steps[0]!.adapter.sha256, adapter_sha256: steps[1]!.adapter.sha256 });
    expect(replayText(r)).toMatch(/MISMATCH/);
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}, 300_000);
