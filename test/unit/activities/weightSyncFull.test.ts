/**
 * trainer.mode = "full": syncWeights reloads a replica's weights in place from the checkpoint's model/
 * (infra/vllm/ratchet_weights.py's /v1/ratchet/weights), against a fake vLLM that keeps what each worker
 * serves. The checkpoints are laid out as the trainer writes them (the checkpoint's MANIFEST.sha256 lists
 * model/'s files; model/ has its own, built here independently of the activity's derivation).
 */
import { mkdirSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { ApplicationFailure } from '@temporalio/common';
import { ArtifactIntegrityError, sha256 } from '../../../src/artifacts/store';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { createWeightSyncActivities, fullWeightsRef } from '../../../src/activities/weightSync';
import { LocalArtifactStore } from '../../../src/artifacts/store';

const logger = pino({ level: 'silent' });
const BASE_DIR = '/models/base';

/** A checkpoint directory as trainer/ratchet_trainer/core/checkpoint.py writes one for mode "full". */
function fullCheckpoint(tag: string, opts: { lora?: boolean } = {}): { ref: ArtifactRef; dir: string } {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-full-ckpt-'));
  const files: Record<string, string> = opts.lora
    ? { 'adapter/adapter_model.safetensors': `adapter ${tag}`, 'adapter/adapter_config.json': '{}' }
    : { 'model/config.json': '{"model_type": "llama"}', 'model/model.safetensors': `weights of ${tag}` };
  files['trainer_state.json'] = `{"tag": "${tag}"}`;
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(path.dirname(path.join(dir, rel)), { recursive: true });
    writeFileSync(path.join(dir, rel), text);
  }
  const sub = opts.lora ? 'adapter' : 'model';
  const inner = Object.entries(files).filter(([rel]) => rel.startsWith(`${sub}/`)).sort()
    .map(([rel, text]) => `${sha256(text)}  ${rel.slice(sub.length + 1)}\n`).join('');
  writeFileSync(path.join(dir, sub, 'MANIFEST.sha256'), inner);
  const top = Object.entries(files).sort().map(([rel, text]) => `${sha256(text)}  ${rel}\n`).join('');
  writeFileSync(path.join(dir, 'MANIFEST.sha256'), top);
  return { ref: { uri: `file://${dir}`, sha256: sha256(top), bytes: 0 }, dir };
}

/** A vLLM with the ratchet_weights hooks: `workers` tensor-parallel workers, each with the directory it serves. */
function fakeVllm(workers = 2) {
  const state = { paths: Array.from({ length: workers }, () => BASE_DIR), route: true, lying: false, down: false };
  const calls: string[] = [];
  const fetchFn = (async (url: string, init?: RequestInit) => {
    if (state.down) throw new TypeError('fetch failed: ECONNREFUSED');
    const route = new URL(url).pathname;
    const body = init?.body ? JSON.parse(String(init.body)) as { path: string | null } : undefined;
    calls.push(`${init?.method ?? 'GET'} ${route}${body ? ` ${body.path}` : ''}`);
    if (route !== '/v1/ratchet/weights' || !state.route) return new Response('{"detail":"Not Found"}', { status: 404 });
    if (body && !state.lying) state.paths = state.paths.map(() => body.path ?? BASE_DIR);
    return new Response(JSON.stringify({ base: BASE_DIR, paths: state.paths }));
  }) as typeof fetch;
  return { state, calls, fetchFn };
}

const activities = (fetchFn: typeof fetch) =>
  createWeightSyncActivities({ logger, fetch: fetchFn, replicaRetryMs: 50, sleep: async () => {}, store: new LocalArtifactStore(tmpdir()) });

const refusal = async (p: Promise<unknown>): Promise<ApplicationFailure> => {
  const err = await p.then(() => undefined, (e: unknown) => e);
  expect(err).toBeInstanceOf(ApplicationFailure);
  return err as ApplicationFailure;
};

describe('fullWeightsRef', () => {
  it("is the checkpoint's model/ directory, with the sha256 of the manifest the trainer wrote there", async () => {
    const { ref, dir } = fullCheckpoint('v1');
    const { readFileSync } = await import('node:fs');
    const got = await fullWeightsRef(ref, new LocalArtifactStore(tmpdir()));
    expect(got.uri).toBe(`${ref.uri}/model`);
    expect(got.sha256).toBe(sha256(readFileSync(path.join(dir, 'model', 'MANIFEST.sha256'))));
  });

  it('refuses a checkpoint whose manifest is not the one its ref names', async () => {
    const { ref } = fullCheckpoint('v1');
    await expect(fullWeightsRef({ ...ref, sha256: sha256('another') }, new LocalArtifactStore(tmpdir()))).rejects.toThrow(ArtifactIntegrityError);
  });
});

describe('syncWeights, trainer.mode = "full"', () => {
  it("reloads every worker from the checkpoint's model/ and reads back what they serve; again is a no-op", async () => {
    const vllm = fakeVllm();
    const { ref, dir } = fullCheckpoint('v1');
    const res = await activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1/'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: ref });
    expect(vllm.calls).toEqual(['GET /v1/ratchet/weights', `POST /v1/ratchet/weights ${path.join(dir, 'model')}`]);
    expect(res.loaded).toEqual(['http://r1/v1#r/full-v1']);
    expect(vllm.state.paths).toEqual([path.join(dir, 'model'), path.join(dir, 'model')]);
    vllm.calls.length = 0;
    const again = await activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: ref });
    expect(vllm.calls).toEqual(['GET /v1/ratchet/weights']);
    expect([again.loaded, again.alreadyLoaded]).toEqual([[], ['http://r1/v1#r/full-v1']]);
  });

  it('version 0 is the base model: a replica serving other weights (another run, an earlier attempt) goes back to it', async () => {
    const vllm = fakeVllm();
    vllm.state.paths = ['/elsewhere/model', '/elsewhere/model'];
    const res = await activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 0, keepFromVersion: 0, full: true });
    expect(vllm.calls).toEqual(['GET /v1/ratchet/weights', 'POST /v1/ratchet/weights null']);
    expect(res.loaded).toEqual(['http://r1/v1#r/full-v0']);
    expect(vllm.state.paths).toEqual([BASE_DIR, BASE_DIR]);
  });

  it('a replica where only some workers serve the version is reloaded', async () => {
    const vllm = fakeVllm();
    const { ref, dir } = fullCheckpoint('v2');
    vllm.state.paths = [path.join(dir, 'model'), BASE_DIR];
    const res = await activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 2, keepFromVersion: 0, full: true, checkpoint: ref });
    expect(res.loaded).toEqual(['http://r1/v1#r/full-v2']);
  });

  it('a vLLM without the hooks is refused with the flags to start it with', async () => {
    const vllm = fakeVllm();
    vllm.state.route = false;
    const err = await refusal(activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: fullCheckpoint('v1').ref }));
    expect(err.type).toBe('WeightSyncRefused');
    expect(err.nonRetryable).toBe(true);
    expect(err.message).toMatch(/no \/ratchet\/weights route.*Fix: .*--worker-extension-cls ratchet_weights\.WeightsWorker.*--middleware ratchet_weights\.WeightsRoute/);
  });

  it('a load the workers do not show afterwards fails the sync (the read-back is the proof)', async () => {
    const vllm = fakeVllm();
    vllm.state.lying = true;
    const err = await refusal(activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: fullCheckpoint('v1').ref }));
    expect([err.type, err.message]).toEqual(['WeightSyncRefused', expect.stringMatching(/answered the load of .* but its workers serve \["\/models\/base","\/models\/base"\]/)]);
  });

  it('corrupt weights (a file changed after the manifest) never reach vLLM', async () => {
    const vllm = fakeVllm();
    const { ref, dir } = fullCheckpoint('v1');
    writeFileSync(path.join(dir, 'model', 'model.safetensors'), 'bit rot');
    await expect(activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: ref }))
      .rejects.toThrow(ArtifactIntegrityError);
    expect(vllm.calls).toEqual([]);
  });

  it('a checkpoint without model/ (a LoRA one), or no checkpoint past version 0, is refused', async () => {
    const vllm = fakeVllm();
    const lora = await refusal(activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: fullCheckpoint('v1', { lora: true }).ref }));
    expect([lora.type, lora.message]).toEqual(['WeightSyncRefused', expect.stringMatching(/has no model\/ directory/)]);
    const none = await refusal(activities(vllm.fetchFn).syncWeights({ runId: 'r', baseUrls: ['http://r1/v1'], policyVersion: 3, keepFromVersion: 0, full: true }));
    expect([none.type, none.message]).toEqual(['WeightSyncRefused', expect.stringMatching(/version 3 of a full fine-tuning run came without its checkpoint/)]);
    expect(vllm.calls).toEqual([]);
  });

  it('a replica that stays down is InferenceUnavailable (the run waits), and a quorum lets the rest go on', async () => {
    const up = fakeVllm();
    const down = fakeVllm();
    down.state.down = true;
    const fetchFn = ((url: string, init?: RequestInit) => (url.startsWith('http://down') ? down.fetchFn : up.fetchFn)(url, init)) as typeof fetch;
    const { ref } = fullCheckpoint('v1');
    const input = { runId: 'r', baseUrls: ['http://up/v1', 'http://down/v1'], policyVersion: 1, keepFromVersion: 0, full: true, checkpoint: ref };
    const err = await refusal(activities(fetchFn).syncWeights(input));
    expect(err.type).toBe('InferenceUnavailable');
    const res = await activities(fetchFn).syncWeights({ ...input, quorum: 1 });
    expect([res.alreadyLoaded, res.behind]).toEqual([['http://up/v1#r/full-v1'], ['http://down/v1']]);
  });
});
