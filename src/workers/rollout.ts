/**
 * The rollout worker, task queue `ratchet-rollout`: one per Docker host. Runs
 * agent episodes in sandboxes and scores them. Sweeps sandboxes a dead worker
 * left behind at start and periodically after.
 *   node dist/workers/rollout.js
 */
import { Worker } from '@temporalio/worker';
import { createRolloutActivities } from '../activities/rollout';
import { defaultStore } from '../artifacts/stores';
import { SandboxManager, startJanitor, sweep } from '../sandbox';
import { componentLogger } from '../shared/logger';
import { TASK_QUEUES } from '../shared/paths';
import { observeSandboxes } from '../metrics';
import { connectWorker } from './connect';
import { startWorkerTelemetry } from './telemetry';
import { startLivenessFile } from './livenessFile';

const log = componentLogger('worker-rollout');

export async function runRolloutWorker(): Promise<void> {
  const stopLiveness = startLivenessFile(log);
  const telemetry = await startWorkerTelemetry('rollout', log);
  // First: a bad connection setting fails here, before any sandbox is touched.
  const { connection, namespace, dataConverter } = await connectWorker(log);
  const sandboxes = new SandboxManager();
  observeSandboxes(() => sandboxes.stats());
  // Containers of an earlier worker that was killed -9 would otherwise hold memory until the janitor's next pass.
  const swept = await sweep(sandboxes.docker, { log });
  log.info({ removed: swept.removed.length, kept: swept.kept }, 'swept sandboxes left by dead workers');
  const janitor = startJanitor(sandboxes.docker, { log });

  const store = defaultStore();
  const slots = Number(process.env.RATCHET_ROLLOUT_SLOTS ?? 4);
  const worker = await Worker.create({
    connection,
    namespace,
    dataConverter,
    taskQueue: TASK_QUEUES.rollout,
    activities: createRolloutActivities({ store, sandboxes }),
    // Each slot is a sandbox plus an agent loop: size it to the host's cores and memory.
    maxConcurrentActivityTaskExecutions: slots,
    // Let in-flight rollouts notice cancellation and remove their sandboxes on shutdown.
    shutdownGraceTime: '10 seconds',
  });
  log.info({ taskQueue: TASK_QUEUES.rollout, slots, workerId: sandboxes.workerId }, 'rollout worker started');
  try {
    await worker.run();
  } finally {
    janitor.stop();
    await connection.close();
    await telemetry.close();
    stopLiveness();
  }
}

if (require.main === module) {
  runRolloutWorker().catch((err: unknown) => {
    log.fatal({ err: String(err) }, 'rollout worker failed');
    process.exit(1);
  });
}
