/**
 * The inference-host worker: one beside each vLLM server that shares no disk with
 * the trainer. It serves `syncWeights` on its own task queue
 * (RATCHET_INFERENCE_QUEUE, e.g. `ratchet-inference-<host>`, listed in the run
 * config's inference.sync_task_queues): the adapter is pulled from the artifact
 * store (s3://) into this host's cache, verified, and loaded into the local vLLM
 * (RATCHET_INFERENCE_URL, default http://127.0.0.1:8000/v1) through /v1/load_lora_adapter.
 *   RATCHET_INFERENCE_QUEUE=ratchet-inference-gpu1 node dist/workers/inference.js
 */
import * as os from 'node:os';
import { Worker } from '@temporalio/worker';
import { createInferenceHostActivities } from '../activities/weightSync';
import { defaultStore } from '../artifacts/stores';
import { componentLogger } from '../shared/logger';
import { DEFAULTS } from '../shared/paths';
import { connectWorker } from './connect';
import { cacheLimitBytes } from '../artifacts/cache';

const log = componentLogger('worker-inference');

export function inferenceQueue(): string {
  return process.env.RATCHET_INFERENCE_QUEUE ?? `ratchet-inference-${os.hostname()}`;
}

export async function runInferenceWorker(): Promise<void> {
  const { connection, namespace, dataConverter } = await connectWorker(log);
  const taskQueue = inferenceQueue();
  const baseUrls = (process.env.RATCHET_INFERENCE_URL ?? DEFAULTS.inferenceUrl).split(',').map((u) => u.trim()).filter(Boolean);
  cacheLimitBytes(); // a bad RATCHET_CACHE_MAX_GIB stops the worker here, not a run at its first download
  const store = defaultStore();
  const worker = await Worker.create({
    connection,
    namespace,
    dataConverter,
    taskQueue,
    activities: createInferenceHostActivities(baseUrls, { store, logger: log }),
    maxConcurrentActivityTaskExecutions: 2,
  });
  log.info({ taskQueue, baseUrls, store: store.url }, 'inference-host worker started');
  try {
    await worker.run();
  } finally {
    await connection.close();
  }
}

if (require.main === module) {
  runInferenceWorker().catch((err: unknown) => {
    log.fatal({ err: String(err) }, 'inference-host worker failed');
    process.exit(1);
  });
}
