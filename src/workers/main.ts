/**
 * The main worker, task queue `ratchet`: TrainRun and its children, plus the
 * light activities (config, dataset, batch building, weight sync, metrics).
 *   node dist/workers/main.js
 */
import { Worker } from '@temporalio/worker';
import { createActivities } from '../activities';
import { beatWhileRunning } from '../activities/liveness';
import { defaultStore } from '../artifacts/stores';
import { componentLogger } from '../shared/logger';
import { TASK_QUEUES } from '../shared/paths';
import { connectWorker } from './connect';
import { startWorkerTelemetry } from './telemetry';
import { startLivenessFile } from './livenessFile';
import { mainWorkerDeployment } from '../deploy/build';
import { cacheLimitBytes } from '../artifacts/cache';

const log = componentLogger('worker-main');

export interface MainWorkerOptions {
  /** The workflow code to bundle (default: this build's src/workflows). The upgrade test's build B passes its own. */
  workflowsPath?: string;
}

export async function runMainWorker(opts: MainWorkerOptions = {}): Promise<void> {
  const stopLiveness = startLivenessFile(log);
  const telemetry = await startWorkerTelemetry('main', log);
  const { connection, namespace, dataConverter } = await connectWorker(log);
  cacheLimitBytes(); // a bad RATCHET_CACHE_MAX_GIB stops the worker here, not a run at its first download
  const store = defaultStore();
  // Worker Versioning (docs/upgrades.md): runs stay on the build they started on until a step boundary.
  const workerDeploymentOptions = mainWorkerDeployment();
  const worker = await Worker.create({
    connection,
    namespace,
    dataConverter,
    taskQueue: TASK_QUEUES.main,
    workflowsPath: opts.workflowsPath ?? require.resolve('../workflows'),
    // Each light activity heartbeats (the LIGHT proxy's heartbeat timeout): a killed main worker is noticed in a minute.
    activities: beatWhileRunning(createActivities({ store, logger: componentLogger('activities') })),
    // Light activities only: batch building is the heaviest, and the machine may be small.
    maxConcurrentActivityTaskExecutions: Number(process.env.RATCHET_MAIN_ACTIVITY_SLOTS ?? 8),
    ...(workerDeploymentOptions ? { workerDeploymentOptions } : {}),
  });
  log.info({ taskQueue: TASK_QUEUES.main, namespace, artifacts: store.url, build: workerDeploymentOptions?.version ?? 'unversioned' }, 'main worker started');
  try {
    await worker.run();
  } finally {
    await connection.close();
    await telemetry.close();
    stopLiveness();
  }
}

if (require.main === module) {
  runMainWorker().catch((err: unknown) => {
    log.fatal({ err: String(err) }, 'main worker failed');
    process.exit(1);
  });
}
