/**
 * Weight sync (src/activities/weightSync.ts): adapters loaded into vLLM replicas, a quorum of replicas,
 * the inference-host worker, unloading a run's adapters, and full weights.
 *
 * The "full weight sync (trainer.mode = "full")" block:
 * trainer.mode = "full": syncWeights reloads a replica's weights in place from the checkpoint's model/
 * (infra/vllm/ratchet_weights.py's /v1/ratchet/weights), against a fake vLLM that keeps what each worker
 * serves. The checkpoints are laid out as the trainer writes them (the checkpoint's MANIFEST.sha256 lists
 * model/'s files; model/ has its own, built here independently of the activity's derivation).
 */
import { mkdtempSync, writeFileSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { ArtifactIntegrityError, sha256, LocalArtifactStore } from '../../../src/artifacts/store';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { createInferenceHostActivities, createWeightSyncActivities, fullWeightsRef } from '../../../src/activities/weightSync';
import { adapterName, adapterVersion } from '../../../src/shared/adapters';
import { ApplicationFailure } from '@temporalio/common';

const logger = pino({ level: 'silent' });

/** A directory artifact as the trainer writes it: files plus MANIFEST.sha256, whose hash is the ref's. */
function adapterDir(tag: string): ArtifactRef {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-adapter-'));
  const weights = `weights of ${tag}`;
  writeFileSync(path.join(dir, 'adapter_model.safetensors'), weights);
  const manifest = `${sha256(weights)}  adapter_model.safetensors\n`;
  writeFileSync(path.join(dir, 'MANIFEST.sha256'), manifest);
  return { uri: `file://${dir}`, sha256: sha256(manifest), bytes: manifest.length };
}

/** An in-memory vLLM: /models, /load_lora_adapter, /unload_lora_adapter; `down` refuses connections. */
function fakeVllm(initial: string[]) {
  const models = new Set(['smollm2-135m', ...initial]);
  /** Where each loaded adapter came from, as vLLM's /models reports it (`root`). */
  const roots = new Map<string, string>();
  const calls: string[] = [];
  const state = { down: false, refuse: false };
  const fetchFn = (async (url: string, init?: RequestInit) => {
    if (state.down) throw new TypeError('fetch failed: ECONNREFUSED');
    const body = init?.body ? JSON.parse(String(init.body)) as { lora_name: string; lora_path?: string } : undefined;
    const route = url.slice(url.lastIndexOf('/') + 1);
    calls.push(body ? `${route} ${body.lora_name}` : route);
    if (route === 'models') return new Response(JSON.stringify({ data: [...models].map((id) => ({ id, ...(roots.has(id) ? { root: roots.get(id) } : {}) })) }));
    if (route === 'load_lora_adapter') {
      if (state.refuse) return new Response('LoRA is not enabled', { status: 400 });
      if (models.has(body!.lora_name)) return new Response(`The lora adapter '${body!.lora_name}' has already been loaded.`, { status: 400 });
      models.add(body!.lora_name);
      if (body!.lora_path) roots.set(body!.lora_name, body!.lora_path);
      return new Response('ok');
    }
    if (route === 'unload_lora_adapter') {
      models.delete(body!.lora_name);
      return new Response('ok');
    }
    return new Response('not found', { status: 404 });
  }) as typeof fetch;
  return { models, roots, calls, state, fetchFn };
}

const activities = (fetchFn: typeof fetch) =>
  createWeightSyncActivities({ logger, fetch: fetchFn, replicaRetryMs: 50, sleep: async () => {} });

describe('adapter names', () => {
  it('carry the run id, and parse back only for that run', () => {
    expect(adapterName('run-a', 3)).toBe('run-a/policy-v3');
    expect(adapterVersion('run-a', 'run-a/policy-v3')).toBe(3);
    expect(adapterVersion('run-a', 'run-ab/policy-v3')).toBeUndefined();
    expect(adapterVersion('run-a', 'run-a/policy-v3x')).toBeUndefined();
    expect(adapterVersion('run-a', 'smollm2-135m')).toBeUndefined();
  });
});

describe('syncWeights', () => {
  it('version 0 with an adapter (a warm start, init_from) loads it as <run>/policy-v0; version 0 without one loads nothing', async () => {
    const vllm = fakeVllm([]);
    const origin = adapterDir('sft-1 step 4');
    const res = await activities(vllm.fetchFn).syncWeights({ runId: 'run-w', baseUrls: ['http://r1/v1'], policyVersion: 0, adapter: origin, keepFromVersion: 0 });
    expect(vllm.calls).toEqual(['models', 'load_lora_adapter run-w/policy-v0']);
    expect(res.loaded).toEqual(['http://r1/v1#run-w/policy-v0']);
    expect(vllm.roots.get('run-w/policy-v0')).toBe(new URL(origin.uri).pathname);
    // Version 1 keeps version 0 while keepFromVersion is 0 (rollouts ahead may still use it), then drops it.
    await activities(vllm.fetchFn).syncWeights({ runId: 'run-w', baseUrls: ['http://r1/v1'], policyVersion: 1, adapter: adapterDir('v1'), keepFromVersion: 0 });
    expect(vllm.models.has('run-w/policy-v0')).toBe(true);
    await activities(vllm.fetchFn).syncWeights({ runId: 'run-w', baseUrls: ['http://r1/v1'], policyVersion: 2, adapter: adapterDir('v2'), keepFromVersion: 1 });
    expect(vllm.models.has('run-w/policy-v0')).toBe(false);
    const plain = fakeVllm([]);
    await activities(plain.fetchFn).syncWeights({ runId: 'run-b', baseUrls: ['http://r1/v1'], policyVersion: 0, keepFromVersion: 1 });
    expect(plain.calls).toEqual(['models']);
  });

  it('reloads a version served from another directory (a redone step\'s earlier attempt), never keeps the old weights', async () => {
    const vllm = fakeVllm(['run-a/policy-v2']);
    vllm.roots.set('run-a/policy-v2', '/artifacts/runs/run-a/checkpoints/step-1-aaaaaaaaaaaaaaaa/adapter');
    const fresh = adapterDir('v2 redone');
    const res = await activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1'], policyVersion: 2, adapter: fresh, keepFromVersion: 1,
    });
    expect(vllm.calls).toEqual(['models', 'unload_lora_adapter run-a/policy-v2', 'load_lora_adapter run-a/policy-v2']);
    expect(res.loaded).toEqual(['http://r1/v1#run-a/policy-v2']);
    expect(vllm.roots.get('run-a/policy-v2')).toBe(new URL(fresh.uri).pathname);
  });

  it('keeps a version served from the same directory', async () => {
    const vllm = fakeVllm(['run-a/policy-v2']);
    const same = adapterDir('v2');
    vllm.roots.set('run-a/policy-v2', new URL(same.uri).pathname);
    const res = await activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1'], policyVersion: 2, adapter: same, keepFromVersion: 1,
    });
    expect(res.alreadyLoaded).toEqual(['http://r1/v1#run-a/policy-v2']);
    expect(vllm.calls).toEqual(['models']);
  });

  it("loads the run's version, unloads only this run's old versions, and leaves other runs alone", async () => {
    const vllm = fakeVllm(['run-a/policy-v1', 'run-a/policy-v2', 'run-b/policy-v1']);
    const res = await activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1'], policyVersion: 3, adapter: adapterDir('v3'), keepFromVersion: 2,
    });
    expect(res.loaded).toEqual(['http://r1/v1#run-a/policy-v3']);
    expect(res.unloaded).toEqual(['http://r1/v1#run-a/policy-v1']);
    expect([...vllm.models].sort()).toEqual(['run-a/policy-v2', 'run-a/policy-v3', 'run-b/policy-v1', 'smollm2-135m']);
  });

  it('is idempotent: a replica already serving the version is left as it is', async () => {
    const vllm = fakeVllm(['run-a/policy-v3']);
    const res = await activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1', 'http://r2/v1/'], policyVersion: 3, adapter: adapterDir('v3'), keepFromVersion: 0,
    });
    expect(res.loaded).toEqual([]);
    expect(res.alreadyLoaded).toEqual(['http://r1/v1#run-a/policy-v3', 'http://r2/v1#run-a/policy-v3']);
    expect(vllm.calls.filter((c) => c.startsWith('load'))).toEqual([]);
  });

  it('a replica that stays down fails as InferenceUnavailable (the workflow waits on it), not as a crash', async () => {
    const vllm = fakeVllm([]);
    vllm.state.down = true;
    await expect(activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1'], policyVersion: 1, adapter: adapterDir('v1'), keepFromVersion: 0,
    })).rejects.toMatchObject({ type: 'InferenceUnavailable', nonRetryable: true });
  });

  describe('a quorum of replicas (inference.sync_quorum)', () => {
    /** Two replicas, r1 and r2, each its own fake vLLM. */
    const pair = () => {
      const r1 = fakeVllm([]);
      const r2 = fakeVllm([]);
      const fetchFn = ((url: string, init?: RequestInit) => (url.includes('//r1/') ? r1.fetchFn(url, init) : r2.fetchFn(url, init))) as typeof fetch;
      return { r1, r2, fetchFn };
    };
    const req = { runId: 'run-a', baseUrls: ['http://r1/v1', 'http://r2/v1'], policyVersion: 1, keepFromVersion: 0 };

    it('reached: the sync succeeds and names the replica that missed it as behind', async () => {
      const { r1, r2, fetchFn } = pair();
      r2.state.down = true;
      const res = await activities(fetchFn).syncWeights({ ...req, adapter: adapterDir('v1'), quorum: 1 });
      expect(res.loaded).toEqual(['http://r1/v1#run-a/policy-v1']);
      expect(res.behind).toEqual(['http://r2/v1']);
      expect(r1.models.has('run-a/policy-v1')).toBe(true);
    });

    it('not reached: InferenceUnavailable, saying how many serve it and how many it needs', async () => {
      const { r1, r2, fetchFn } = pair();
      r1.state.down = true;
      r2.state.down = true;
      await expect(activities(fetchFn).syncWeights({ ...req, adapter: adapterDir('v1'), quorum: 1 }))
        .rejects.toMatchObject({ type: 'InferenceUnavailable', message: expect.stringMatching(/0 of 2 serve the version; the sync needs a quorum of 1/) });
    });

    it('without a quorum (older histories) every replica must serve it, as before', async () => {
      const { r2, fetchFn } = pair();
      r2.state.down = true;
      await expect(activities(fetchFn).syncWeights({ ...req, adapter: adapterDir('v1') }))
        .rejects.toMatchObject({ type: 'InferenceUnavailable', message: expect.stringMatching(/needs every replica/) });
    });

    it('every replica up: nothing is behind', async () => {
      const { fetchFn } = pair();
      const res = await activities(fetchFn).syncWeights({ ...req, adapter: adapterDir('v1'), quorum: 1 });
      expect(res.behind).toBeUndefined();
      expect(res.loaded).toHaveLength(2);
    });
  });

  it('a server that refuses adapters names the flags to fix', async () => {
    const vllm = fakeVllm([]);
    vllm.state.refuse = true;
    await expect(activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1'], policyVersion: 1, adapter: adapterDir('v1'), keepFromVersion: 0,
    })).rejects.toMatchObject({ type: 'WeightSyncRefused', message: expect.stringMatching(/--enable-lora/) });
  });

  it('a corrupt adapter (a file that no longer matches its manifest) is never loaded', async () => {
    const vllm = fakeVllm([]);
    const ref = adapterDir('v1');
    writeFileSync(path.join(new URL(ref.uri).pathname, 'adapter_model.safetensors'), 'tampered');
    await expect(activities(vllm.fetchFn).syncWeights({
      runId: 'run-a', baseUrls: ['http://r1/v1'], policyVersion: 1, adapter: ref, keepFromVersion: 0,
    })).rejects.toBeInstanceOf(ArtifactIntegrityError);
    expect(vllm.calls).toEqual([]);
  });
});

describe('inference-host worker (src/workers/inference.ts)', () => {
  it('loads the adapter into its own vLLM when the workflow sends no URLs, from a verified local copy', async () => {
    const vllm = fakeVllm([]);
    const seen: string[] = [];
    const fetchFn = (async (url: string, init?: RequestInit) => {
      if (init?.body) seen.push(`${url} ${String(init.body)}`);
      return vllm.fetchFn(url, init);
    }) as typeof fetch;
    const host = createInferenceHostActivities(['http://10.0.0.7:8000/v1'], { logger, fetch: fetchFn, replicaRetryMs: 50, sleep: async () => {} });
    const adapter = adapterDir('v1');
    const out = await host.syncWeights({ runId: 'r', baseUrls: [], policyVersion: 1, adapter, keepFromVersion: 0 });
    expect(out.loaded).toEqual(['http://10.0.0.7:8000/v1#r/policy-v1']);
    expect(seen[0]).toContain('http://10.0.0.7:8000/v1/load_lora_adapter');
    expect(seen[0]).toContain(`"lora_path":"${adapter.uri.slice('file://'.length)}"`);
  });

  it('refuses an adapter whose manifest does not match its ref, before vLLM sees it', async () => {
    const vllm = fakeVllm([]);
    const host = createInferenceHostActivities(['http://h:8000/v1'], { logger, fetch: vllm.fetchFn, replicaRetryMs: 50, sleep: async () => {} });
    const adapter = { ...adapterDir('v1'), sha256: 'f'.repeat(64) };
    await expect(host.syncWeights({ runId: 'r', baseUrls: [], policyVersion: 1, adapter, keepFromVersion: 0 })).rejects.toThrow(ArtifactIntegrityError);
    expect(vllm.calls.filter((c) => c.startsWith('load_lora_adapter'))).toEqual([]);
  });
});

describe('unloadRunAdapters', () => {
  it("unloads every adapter of the ended run from every replica and leaves other runs' and the base model", async () => {
    const vllm = fakeVllm(['run-a/policy-v2', 'run-a/policy-v3', 'run-ab/policy-v1', 'run-b/policy-v1']);
    const res = await activities(vllm.fetchFn).unloadRunAdapters({ runId: 'run-a', baseUrls: ['http://r1/v1'] });
    expect(res.unloaded).toEqual(['http://r1/v1#run-a/policy-v2', 'http://r1/v1#run-a/policy-v3']);
    expect([...vllm.models].sort()).toEqual(['run-ab/policy-v1', 'run-b/policy-v1', 'smollm2-135m']);
  });

  it('skips a replica that is down (a restarted server serves no adapter)', async () => {
    const vllm = fakeVllm(['run-a/policy-v1']);
    vllm.state.down = true;
    const res = await activities(vllm.fetchFn).unloadRunAdapters({ runId: 'run-a', baseUrls: ['http://r1/v1'] });
    expect(res.unloaded).toEqual([]);
    expect(res.down).toHaveLength(1);
  });
});

describe('full weight sync (trainer.mode = "full")', () => {
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
});
