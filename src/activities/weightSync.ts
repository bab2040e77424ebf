import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { ArtifactRef } from '../artifacts/ref';
import { LocalArtifactStore, MANIFEST, type ArtifactStore, manifestEntries, sha256, uriToPath, verifyLocalDir } from '../artifacts/store';
import { storeForRef, withStoreErrors } from '../artifacts/stores';
import { recordServed } from '../artifacts/cache';
import { S3ArtifactStore } from '../artifacts/s3';
import { adapterName, adapterVersion } from '../shared/adapters';
import { replicaName } from '../shared/replicas';
import type { Logger } from '../shared/logger';
import { LIVENESS_DEFAULTS } from '../shared/liveness';
import type { SyncWeightsInput, SyncWeightsResult, WeightSyncActivities } from '../contracts';
import { withLiveness, type Liveness } from './liveness';

export interface WeightSyncDeps {
  logger: Logger;
  /** The worker's default store (adapters of runs without [artifacts] url). */
  store?: ArtifactStore;
  fetch?: typeof fetch;
  /** How long one activity attempt keeps retrying a replica that is down before reporting it. */
  replicaRetryMs?: number;
  sleep?: (ms: number) => Promise<void>;
}

/** A local directory artifact's sha256 is over its MANIFEST.sha256; check it and every file it lists. */
export async function verifyDirectoryArtifact(ref: ArtifactRef): Promise<string> {
  return verifyLocalDir(uriToPath(ref.uri), ref);
}

class ReplicaDown extends Error {}

/** The route infra/vllm/ratchet_weights.py adds to vLLM, beside /v1/models. */
export const FULL_WEIGHTS_ROUTE = 'ratchet/weights';

const FULL_WEIGHTS_FIX = 'Fix: start vLLM with PYTHONPATH=<repo>/infra/vllm, --worker-extension-cls ratchet_weights.WeightsWorker and ' +
  '--middleware ratchet_weights.WeightsRoute (ratchet up --config does for trainer.mode = "full"; docs/gpu.md, "Full fine-tuning")';

/**
 * The ref of a full checkpoint's model/ directory, from the checkpoint's own ref: its MANIFEST.sha256 (checked
 * against the checkpoint's sha256) lists model/'s files, which are exactly what model/MANIFEST.sha256 lists,
 * so the sub-directory is verified like any artifact without the workflow carrying a second ref.
 */
export async function fullWeightsRef(checkpoint: ArtifactRef, store: ArtifactStore): Promise<ArtifactRef> {
  const top = await store.get({ uri: `${checkpoint.uri}/${MANIFEST}`, sha256: checkpoint.sha256, bytes: 0 });
  const files = manifestEntries(top.toString('utf8')).filter((e) => e.rel.startsWith('model/'));
  if (!files.length) {
    throw ApplicationFailure.nonRetryable(`checkpoint ${checkpoint.uri} has no model/ directory (a LoRA checkpoint?), so there are no full weights to serve. ` +
      'Fix: a run with trainer.mode = "full" serves the checkpoints its own trainer saved', 'WeightSyncRefused');
  }
  const text = files.map((e) => `${e.sha}  ${e.rel.slice('model/'.length)}\n`).join('');
  return { uri: `${checkpoint.uri}/model`, sha256: sha256(text), bytes: 0 };
}

const realDir = (dir: string): Promise<string> => fs.realpath(dir).catch(() => path.resolve(dir));

/**
 * Loads `<run>/policy-v<N>` into every vLLM replica and unloads this run's versions no one
 * needs (other runs' adapters on the same server are never touched).
 * Idempotent: a replica that already serves the version is fine. A replica that
 * is down is retried with backoff for a while; then the attempt fails with
 * InferenceUnavailable, which the workflow answers by pausing
 * (status `waiting-for-inference`) and trying again, never by failing the run.
 */
export function createWeightSyncActivities({ logger, store = new LocalArtifactStore(), fetch: fetchFn = fetch, replicaRetryMs = 20_000, sleep = (ms) => new Promise((r) => setTimeout(r, ms)) }: WeightSyncDeps) {
  async function call(live: Liveness, url: string, init?: RequestInit): Promise<{ status: number; text: string }> {
    let res: Response;
    let text: string;
    try {
      res = await fetchFn(url, { ...init, signal: AbortSignal.any([AbortSignal.timeout(30_000), live.signal]) });
      text = await res.text();
    } catch (err) {
      if (live.signal.aborted) throw err;
      live.progress({ phase: 'http error', url });
      throw new ReplicaDown(`${url}: ${(err as Error).message}`);
    }
    // Any answer, even an error status, is progress: the replica is there and talking.
    live.progress({ phase: 'http response', url, status: res.status });
    if (res.status >= 500) throw new ReplicaDown(`${url}: HTTP ${res.status} ${text.slice(0, 200)}`);
    return { status: res.status, text };
  }

  /** Served model names, each with the directory it was loaded from (vLLM's `root`; the base model's is its path). */
  async function servedModels(live: Liveness, baseUrl: string): Promise<Map<string, string | undefined>> {
    const { status, text } = await call(live, `${baseUrl}/models`);
    if (status !== 200) throw new ReplicaDown(`${baseUrl}/models: HTTP ${status} ${text.slice(0, 200)}`);
    const body = JSON.parse(text) as { data?: { id: string; root?: string }[] };
    return new Map((body.data ?? []).map((m) => [m.id, m.root]));
  }

  async function unload(live: Liveness, baseUrl: string, name: string): Promise<boolean> {
    const { status, text } = await call(live, `${baseUrl}/unload_lora_adapter`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ lora_name: name }),
    });
    if (status !== 200) logger.warn({ baseUrl, adapter: name, status, body: text.slice(0, 200) }, 'could not unload an adapter; it only costs memory');
    return status === 200;
  }

  /** The cache must keep what the replica serves: vLLM reads an adapter's directory again when its own LoRA cache dropped it. */
  async function keepServed(live: Liveness, baseUrl: string, cacheRoot: string): Promise<void> {
    try {
      const roots = [...(await servedModels(live, baseUrl)).values()].filter((r): r is string => typeof r === 'string');
      await recordServed(cacheRoot, baseUrl, roots);
    } catch (err) {
      // The version is served; the next sync records the set again (until then the in-use window spares it).
      logger.warn({ baseUrl, err: (err as Error).message }, 'could not record the adapters this replica serves for the download cache');
    }
  }

  /** What a replica's workers serve: each worker's weights directory, and the base model's (infra/vllm/ratchet_weights.py). */
  function weightsState(baseUrl: string, status: number, text: string): { base: string; paths: string[] } {
    if (status === 404) {
      throw ApplicationFailure.nonRetryable(`${baseUrl} has no /${FULL_WEIGHTS_ROUTE} route, so it cannot take full weights (trainer.mode = "full"). ${FULL_WEIGHTS_FIX}`, 'WeightSyncRefused');
    }
    if (status !== 200) throw new ReplicaDown(`${baseUrl}/${FULL_WEIGHTS_ROUTE}: HTTP ${status} ${text.slice(0, 200)}`);
    const body = JSON.parse(text) as { base?: string; paths?: string[] };
    return { base: body.base ?? '', paths: body.paths ?? [] };
  }

  const servesOnly = async (paths: string[], dir: string) => paths.length > 0 && (await Promise.all(paths.map(realDir))).every((p) => p === dir);

  /**
   * trainer.mode = "full": the replica's workers reload their weights in place from `weightsDir` (the base
   * model's directory when undefined: version 0). Idempotent: a replica whose every worker already serves
   * that directory is left alone. After a load the workers are asked again what they serve (the probe).
   */
  async function syncFullReplica(live: Liveness, baseUrl: string, input: SyncWeightsInput, weightsDir: string | undefined, out: SyncWeightsResult): Promise<string[]> {
    const label = `${baseUrl}#${input.runId}/full-v${input.policyVersion}`;
    const got = await call(live, `${baseUrl}/${FULL_WEIGHTS_ROUTE}`);
    const before = weightsState(baseUrl, got.status, got.text);
    const want = await realDir(weightsDir ?? before.base);
    if (await servesOnly(before.paths, want)) {
      out.alreadyLoaded.push(label);
      return before.paths;
    }
    const { status, text } = await call(live, `${baseUrl}/${FULL_WEIGHTS_ROUTE}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ path: weightsDir ?? null }),
    });
    if (status !== 200 && status !== 404) {
      throw ApplicationFailure.nonRetryable(`${baseUrl} refused the full weights of version ${input.policyVersion} from ${want}: HTTP ${status} ${text.slice(0, 300)}. ` +
        'Fix: the directory must be readable on the inference host (a shared disk, or inference.sync_task_queues so each host pulls it from the store)', 'WeightSyncRefused');
    }
    const after = weightsState(baseUrl, status, text);
    if (!(await servesOnly(after.paths, want))) {
      throw ApplicationFailure.nonRetryable(`${baseUrl} answered the load of ${want} but its workers serve ${JSON.stringify(after.paths)}. ` +
        'Fix: check the vLLM log for the reload; restart the replica (it comes back on the base model, and the next sync loads the version)', 'WeightSyncRefused');
    }
    out.loaded.push(label);
    logger.info({ baseUrl, policyVersion: input.policyVersion, weightsDir: want }, 'full weights reloaded; prefix cache reset');
    return after.paths;
  }

  // The load/unload endpoints live beside /v1/models: <base>/load_lora_adapter.
  async function syncReplica(live: Liveness, baseUrl: string, input: SyncWeightsInput, adapterDir: string | undefined, out: SyncWeightsResult): Promise<void> {
    const models = await servedModels(live, baseUrl);
    const want = adapterName(input.runId, input.policyVersion);
    // Version 0 is the base model, unless the run started from another run's adapter ([model] init_from).
    if (input.policyVersion > 0 || input.adapter) {
      const servedFrom = models.get(want);
      // A step redone after a crash saves its adapter under a new directory (keyed by its batch): a
      // replica still serving the name from the earlier attempt serves weights the trainer does not hold.
      const stale = models.has(want) && servedFrom !== undefined && adapterDir !== undefined && path.resolve(servedFrom) !== path.resolve(adapterDir);
      if (stale) {
        logger.warn({ baseUrl, adapter: want, servedFrom, adapterDir }, 'replica serves this version from another directory (an earlier attempt of the step); reloading');
        await unload(live, baseUrl, want);
      }
      if (models.has(want) && !stale) {
        out.alreadyLoaded.push(`${baseUrl}#${want}`);
      } else {
        const { status, text } = await call(live, `${baseUrl}/load_lora_adapter`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ lora_name: want, lora_path: adapterDir }),
        });
        if (status === 200) out.loaded.push(`${baseUrl}#${want}`);
        else if (/already (been )?loaded/i.test(text)) out.alreadyLoaded.push(`${baseUrl}#${want}`);
        else {
          throw ApplicationFailure.nonRetryable(
            `${baseUrl} refused adapter ${want} from ${adapterDir}: HTTP ${status} ${text.slice(0, 300)}. ` +
            'Fix: start vLLM with --enable-lora, VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --max-lora-rank >= the config\'s trainer.lora.rank ' +
            '(the local stack: RATCHET_VLLM_MAX_LORA_RANK for infra/inference.sh, 8 unless set).',
            'WeightSyncRefused');
        }
      }
    }
    for (const name of models.keys()) {
      const v = adapterVersion(input.runId, name);
      if (v === undefined || v >= input.keepFromVersion || v === input.policyVersion) continue;
      if (await unload(live, baseUrl, name)) out.unloaded.push(`${baseUrl}#${name}`);
    }
  }

  return {
    /**
     * The run ended: every adapter of this run leaves every replica (other runs' stay). A replica
     * that is down is skipped: a restarted vLLM serves no adapter anyway.
     */
    async unloadRunAdapters(input: { runId: string; baseUrls: string[] }): Promise<{ unloaded: string[]; down: string[] }> {
      return withLiveness({
        name: 'unloadRunAdapters', heartbeatEveryMs: LIVENESS_DEFAULTS.heartbeat_every_s * 1000, stallMs: LIVENESS_DEFAULTS.weight_sync_stall_s * 1000, logger,
      }, async (live) => {
        const out = { unloaded: [] as string[], down: [] as string[] };
        for (const baseUrl of input.baseUrls) {
          const url = baseUrl.replace(/\/+$/, '');
          try {
            for (const name of (await servedModels(live, url)).keys()) {
              if (adapterVersion(input.runId, name) !== undefined && await unload(live, url, name)) out.unloaded.push(`${url}#${name}`);
            }
          } catch (err) {
            if (!(err instanceof ReplicaDown)) throw err;
            out.down.push(err.message);
          }
        }
        logger.info({ runId: input.runId, ...out }, 'run ended: its adapters unloaded from inference');
        return out;
      });
    },

    async syncWeights(input: SyncWeightsInput): Promise<SyncWeightsResult> {
      const w = input.liveness ?? { heartbeat_every_s: LIVENESS_DEFAULTS.heartbeat_every_s, stall_s: LIVENESS_DEFAULTS.weight_sync_stall_s };
      return withLiveness({ name: 'syncWeights', heartbeatEveryMs: w.heartbeat_every_s * 1000, stallMs: w.stall_s * 1000, logger },
        (live) => syncWeights(live, input));
    },
  } satisfies WeightSyncActivities;

  async function syncWeights(live: Liveness, input: SyncWeightsInput): Promise<SyncWeightsResult> {
    const started = Date.now();
    if (input.full && input.policyVersion > 0 && !input.checkpoint) {
      throw ApplicationFailure.nonRetryable(`policy version ${input.policyVersion} of a full fine-tuning run came without its checkpoint: nothing to serve`, 'WeightSyncRefused');
    }
    if (!input.full && input.policyVersion > 0 && !input.adapter) {
      throw ApplicationFailure.nonRetryable(`policy version ${input.policyVersion} has no adapter to serve. Fix: a LoRA run's sync names its adapter; a full fine-tuning run's names its checkpoint (full)`, 'WeightSyncRefused');
    }
    const checkpointStore = input.full && input.checkpoint ? storeForRef(input.checkpoint, input.artifacts, store) : undefined;
    // Full weights: the checkpoint's model/ directory, verified (and pulled into this host's cache when in S3) like an adapter.
    const adapter = input.full ? (checkpointStore && await withStoreErrors(() => fullWeightsRef(input.checkpoint!, checkpointStore))) : input.adapter;
    const adapterStore = adapter && (checkpointStore ?? storeForRef(adapter, input.artifacts, store));
    // vLLM reads a local directory: an s3:// adapter is pulled (verified) into this host's cache first.
    const adapterDir = adapter && adapterStore ? await withStoreErrors(() => adapterStore.localDir(adapter)) : undefined;
    const out: SyncWeightsResult = { policyVersion: input.policyVersion, loaded: [], alreadyLoaded: [], unloaded: [], ms: 0 };
    const down: string[] = [];
    const behind: string[] = [];
    for (const baseUrl of input.baseUrls) {
      const url = replicaName(baseUrl);
      let delay = 500;
      const deadline = Date.now() + replicaRetryMs;
      for (;;) {
        try {
          if (input.full) {
            const served = await syncFullReplica(live, url, input, adapterDir, out);
            if (adapterStore instanceof S3ArtifactStore) {
              await recordServed(adapterStore.cacheRoot, url, served).catch((err: Error) =>
                logger.warn({ baseUrl: url, err: err.message }, 'could not record the weights this replica serves for the download cache'));
            }
          } else {
            await syncReplica(live, url, input, adapterDir, out);
            if (adapterStore instanceof S3ArtifactStore) await keepServed(live, url, adapterStore.cacheRoot);
          }
          break;
        } catch (err) {
          if (!(err instanceof ReplicaDown)) throw err;
          if (Date.now() + delay > deadline) {
            down.push(err.message);
            behind.push(url);
            break;
          }
          logger.warn({ baseUrl: url, err: err.message, retryInMs: delay }, 'inference replica is down; retrying');
          await sleep(delay);
          delay = Math.min(delay * 2, 5_000);
        }
      }
    }
    // A quorum (inference.sync_quorum) is enough: the replicas that missed the version are named
    // behind, and the rollouts' replica pool keeps off them until a later sync loads it.
    const reached = input.baseUrls.length - down.length;
    if (down.length && (input.quorum === undefined || reached < input.quorum)) {
      const need = input.quorum === undefined ? 'every replica' : `a quorum of ${input.quorum}`;
      throw ApplicationFailure.nonRetryable(`inference replica(s) down (${reached} of ${input.baseUrls.length} serve the version; the sync needs ${need}): ${down.join('; ')}`, 'InferenceUnavailable', { down });
    }
    out.ms = Date.now() - started;
    if (down.length) {
      out.behind = behind;
      logger.warn({ runId: input.runId, policyVersion: input.policyVersion, behind, down, quorum: input.quorum }, 'weights synced to a quorum of replicas; the rest are behind and get no rollouts until synced');
    }
    logger.info({ runId: input.runId, ...out }, 'weights synced');
    return out;
  }
}

/**
 * An inference host's activities (src/workers/inference.ts): syncWeights against this
 * host's own vLLM replicas. The workflow sends no URLs to a host's queue.
 */
export function createInferenceHostActivities(localBaseUrls: string[], deps: WeightSyncDeps) {
  const { syncWeights } = createWeightSyncActivities(deps);
  return {
    // A host's own replicas all take the version: the workflow's quorum counts hosts, not URLs.
    syncWeights: ({ quorum: _hosts, ...input }: SyncWeightsInput) => syncWeights({ ...input, baseUrls: input.baseUrls.length ? input.baseUrls : localBaseUrls }),
  };
}
