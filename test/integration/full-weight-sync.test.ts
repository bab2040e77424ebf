/**
 * Full fine-tuning's weight sync on a real vLLM (issue 41): a second CPU vLLM with SmolLM2, started by
 * infra/inference.sh with RATCHET_VLLM_FULL_WEIGHTS=1 (niced, on its own port and run dir; the stack's
 * vLLM is never touched), is given a full checkpoint as the trainer lays it out, through the weight-sync
 * activity itself (syncWeights with full: the checkpoint's model/ verified, POST /v1/ratchet/weights, the
 * workers read back). What vLLM then serves is compared with transformers on the checkpoint's weights,
 * computed in another process: every prompt token's logprob, and the next-token logprobs after a prompt
 * whose prefix vLLM cached under the old weights (so a prefix cache that was not reset fails it). The
 * same numbers before the sync match the base model and differ from the checkpoint's; a second sync
 * loads nothing; version 0 brings the base model back.
 *
 * A long test (vLLM's start on the CPU takes a minute or more): npm run test:long.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, realpathSync, rmSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { describeLong, REPO, STATE } from '../helpers/stack';
import { createWeightSyncActivities } from '../../src/activities/weightSync';
import type { ArtifactRef } from '../../src/artifacts/ref';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { OpenAIModelClient } from '../../src/agent/model';
import { ServedWeights, ServedWeightsMismatch, guardServedWeights } from '../../src/agent/servedWeights';

const PORT = Number(process.env.RATCHET_FULL_SYNC_PORT ?? 8100);
const BASE_URL = `http://127.0.0.1:${PORT}/v1`;
const MODEL = 'smollm2-135m';
const MODEL_DIR = path.join(STATE, 'models', 'SmolLM2-135M-Instruct');
const PYTHON = path.join(STATE, 'venvs', 'trainer', 'bin', 'python');
const HELPER = path.join(REPO, 'test', 'fixtures', 'full-weights', 'full_weights.py');
/** vLLM CPU fp32 against torch fp32 (docs/training.md, "Parity": PARITY_MAX). */
const SAME = 2e-3;
/** What the checkpoint's changes move at least one logprob by, so "same" cannot pass on the old weights. */
const MOVED = 0.05;
/** Long enough to fill several KV blocks (vLLM's CPU backend caches whole blocks of 128 tokens). */
const TEXT = Array.from({ length: 6 }, (_, i) => `def parse_config_${i}(path):\n    """Read the TOML file at path and return its settings as a dict."""\n` +
  `    with open(path, "rb") as f:\n        data = tomllib.load(f)\n    return {k: v for k, v in data.items() if not k.startswith("_${i}")}\n`).join('\n');

interface Scored { ids: number[]; prompt: number[]; next: Record<string, number> }

const sh = (args: string[], env: NodeJS.ProcessEnv = {}) =>
  execFileSync('nice', ['-n', '19', ...args], { cwd: REPO, env: { ...process.env, ...env }, encoding: 'utf8', maxBuffer: 16 << 20, timeout: 400_000 });

const maxDiff = (a: number[], b: number[]) => Math.max(...a.map((x, i) => Math.abs(x - b[i]!)));

/** vLLM's logprob of each prompt token after the first, and its top-5 next-token logprobs after the prompt. */
async function served(ids: number[]): Promise<{ prompt: number[]; next: Record<string, number> }> {
  const post = async (body: object) => {
    const res = await fetch(`${BASE_URL}/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, prompt: ids, ...body }) });
    if (res.status !== 200) throw new Error(`completions: HTTP ${res.status} ${await res.text()}`);
    return (await res.json() as { choices: { prompt_logprobs?: (Record<string, { logprob: number }> | null)[]; logprobs?: { top_logprobs: Record<string, number>[] } }[] }).choices[0]!;
  };
  const p = await post({ max_tokens: 1, temperature: 1, prompt_logprobs: 0 });
  const prompt = p.prompt_logprobs!.slice(1).map((d, i) => d![String(ids[i + 1])]!.logprob);
  // No prompt_logprobs here: this request reads the prefix cache, which the sync must have reset.
  const n = await post({ max_tokens: 1, temperature: 1, seed: 0, logprobs: 5, return_tokens_as_token_ids: true });
  const next = Object.fromEntries(Object.entries(n.logprobs!.top_logprobs[0]!).map(([t, lp]) => [t.replace(/^token_id:/, ''), lp]));
  return { prompt, next };
}

function nextDiff(got: Record<string, number>, want: Record<string, number>): number {
  // The top token ids must agree; their logprobs within tolerance (ties at the 5th place aside).
  const ids = Object.keys(want).slice(0, 3);
  return Math.max(...ids.map((t) => (got[t] === undefined ? Infinity : Math.abs(got[t]! - want[t]!))));
}

describeLong('full-weight sync into a real vLLM (trainer.mode = "full")', ['model', 'trainerVenv'], () => {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-full-sync-'));
  const env = {
    RATCHET_VLLM_PORT: String(PORT), RATCHET_RUN_DIR: path.join(dir, 'run'), RATCHET_VLLM_LOG: path.join(dir, 'vllm.log'),
    RATCHET_VLLM_FULL_WEIGHTS: '1', VLLM_CPU_KVCACHE_SPACE: '1', RATCHET_VLLM_MAX_MODEL_LEN: '2048',
  };
  const logger = pino({ level: process.env.LOG_LEVEL ?? 'silent' });
  const activities = createWeightSyncActivities({ logger, store: new LocalArtifactStore(path.join(dir, 'store')) });
  const sync = (policyVersion: number, checkpoint?: ArtifactRef) =>
    activities.syncWeights({ runId: 'full-sync', baseUrls: [BASE_URL], policyVersion, keepFromVersion: 0, full: true, ...(checkpoint ? { checkpoint } : {}) });

  afterAll(() => {
    try {
      sh(['bash', 'infra/inference.sh', 'stop'], env);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  test('vLLM serves the checkpoint\'s weights after the sync (transformers agrees), the base model before and after version 0', async () => {
    const t0 = Date.now();
    sh(['bash', 'infra/inference.sh', 'start'], env);
    const started = Date.now();
    const checkpoint = JSON.parse(sh([PYTHON, HELPER, 'make', MODEL_DIR, path.join(dir, 'store', 'ckpt')]).trim().split('\n').pop()!) as ArtifactRef;
    const base = JSON.parse(sh([PYTHON, HELPER, 'score', MODEL_DIR, MODEL_DIR, TEXT]).trim().split('\n').pop()!) as Scored;
    const trained = JSON.parse(sh([PYTHON, HELPER, 'score', MODEL_DIR, path.join(dir, 'store', 'ckpt', 'model'), TEXT]).trim().split('\n').pop()!) as Scored;
    expect(trained.ids).toEqual(base.ids);
    expect(maxDiff(trained.prompt, base.prompt)).toBeGreaterThan(MOVED);

    const before = await served(base.ids);
    const v1 = await sync(1, checkpoint);
    const after = await served(base.ids);
    const again = await sync(1, checkpoint);
    const v0 = await sync(0);
    const restored = await served(base.ids);
    const measured = {
      vllmStartS: (started - t0) / 1000,
      before: { vsBase: maxDiff(before.prompt, base.prompt), vsTrained: maxDiff(before.prompt, trained.prompt), next: nextDiff(before.next, base.next) },
      after: { vsTrained: maxDiff(after.prompt, trained.prompt), vsBase: maxDiff(after.prompt, base.prompt), next: nextDiff(after.next, trained.next) },
      restored: { vsBase: maxDiff(restored.prompt, base.prompt), next: nextDiff(restored.next, base.next) },
      syncMs: v1.ms, tokens: base.ids.length,
    };
    process.stdout.write(`full-weight sync measured: ${JSON.stringify(measured)}\n`);

    expect(measured.before.vsBase).toBeLessThan(SAME);
    expect(measured.before.next).toBeLessThan(SAME);
    expect(measured.before.vsTrained).toBeGreaterThan(MOVED);
    expect(v1.loaded).toEqual([`${BASE_URL}#full-sync/full-v1`]);
    expect(measured.after.vsTrained).toBeLessThan(SAME);
    expect(measured.after.next).toBeLessThan(SAME);
    expect(measured.after.vsBase).toBeGreaterThan(MOVED);
    expect([again.loaded, again.alreadyLoaded]).toEqual([[], [`${BASE_URL}#full-sync/full-v1`]]);
    expect(v0.loaded).toEqual([`${BASE_URL}#full-sync/full-v0`]);
    expect(measured.restored.vsBase).toBeLessThan(SAME);
    expect(measured.restored.next).toBeLessThan(SAME);
  }, 900_000);

  test('a vLLM restarted after the sync is noticed before a rollout samples from it (it serves the base model); the re-sync brings the checkpoint back', async () => {
    sh(['bash', 'infra/inference.sh', 'start'], env);
    // Where the trainer saves a run's checkpoint: the rollouts match <run>/checkpoints/<step-dir>/model.
    const at = path.join(dir, 'store', 'runs', 'full-sync', 'checkpoints', 'step-0-0123456789abcdef');
    const checkpoint = JSON.parse(sh([PYTHON, HELPER, 'make', MODEL_DIR, at]).trim().split('\n').pop()!) as ArtifactRef;
    const policy = guardServedWeights(new OpenAIModelClient(BASE_URL), BASE_URL, { runId: 'full-sync', policyVersion: 1, checkpoint: checkpoint.uri }, new ServedWeights());
    const turn = () => policy.complete({ model: MODEL, messages: [{ role: 'user', content: 'Say hi.' }], tools: [], sampling: { temperature: 1, top_p: 1, max_tokens: 4 } });
    const t0 = Date.now();
    expect((await sync(1, checkpoint)).loaded).toEqual([`${BASE_URL}#full-sync/full-v1`]);
    const synced = await turn();
    expect(synced.weights).toBe(realpathSync(path.join(at, 'model')));
    const restartS0 = Date.now();
    sh(['bash', 'infra/inference.sh', 'restart'], env);
    const restartS = (Date.now() - restartS0) / 1000;
    const failed = async () => turn().then(() => undefined, (e: unknown) => e as Error & { cause?: { message?: string; code?: string } });
    let refused = await failed();
    const first = `${refused?.name}: ${refused?.message} (${refused?.cause?.code ?? refused?.cause?.message ?? ''})`;
    // A connection the client pooled before the restart may fail the first request (a network error: the rollout's
    // retry, as for any replica that went away); the next one must find the base model.
    if (!(refused instanceof ServedWeightsMismatch)) refused = await failed();
    process.stdout.write(`first turn after the restart: ${first}\n`);
    expect(refused).toBeInstanceOf(ServedWeightsMismatch);
    expect((refused as ServedWeightsMismatch).message).toContain('a restarted replica, not checkpoint step-0-0123456789abcdef');
    // StepRollouts' answer: the version's sync, which reloads the restarted replica (not a no-op).
    const again = await sync(1, checkpoint);
    expect(again.loaded).toEqual([`${BASE_URL}#full-sync/full-v1`]);
    const after = await turn();
    expect(after.weights).toBe(realpathSync(path.join(at, 'model')));
    process.stdout.write(`full-weight restart measured: ${JSON.stringify({ restartS, first, servedAfterRestart: (refused as ServedWeightsMismatch).served, totalS: (Date.now() - t0) / 1000 })}\n`);
  }, 900_000);
});
