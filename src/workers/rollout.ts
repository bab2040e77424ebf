/**
 * The rollout worker, task queue `ratchet-rollout`: one or more per Docker host.
 * Runs agent episodes in sandboxes and scores them. Keeps a lease in the artifact
 * store while it runs, and sweeps the sandboxes of workers whose lease lapsed (on
 * this host or any other that shares its Docker daemon) at start and periodically. A host that
 * cannot run rollouts stops polling until its health probe passes (src/rollouts/hostHealth.ts).
 *   node dist/workers/rollout.js
 */
import { hostname } from 'node:os';
import { Worker } from '@temporalio/worker';
import { createRolloutActivities } from '../activities/rollout';
import { rolloutWorkerDeployment } from '../deploy/build';
import { defaultStore } from '../artifacts/stores';
import { SandboxManager, startJanitor, sweep } from '../sandbox';
import { defaultImage } from '../sandbox/options';
import { HostHealth, healthKey, probeHost, type HostHealthRecord } from '../rollouts/hostHealth';
import { RolloutSlots } from '../rollouts/slots';
import { LeaseKeeper, LeaseStore, leaseTimingFromEnv } from '../sandbox/lease';
import { componentLogger } from '../shared/logger';
import { TASK_QUEUES } from '../shared/paths';
import { observeSandboxes } from '../metrics';
import { connectWorker } from './connect';
import { serveWhileHealthy } from './serveWhileHealthy';
import { startWorkerTelemetry } from './telemetry';
import { startLivenessFile } from './livenessFile';

const log = componentLogger('worker-rollout');

export async function runRolloutWorker(): Promise<void> {
  const stopLiveness = startLivenessFile(log);
  const telemetry = await startWorkerTelemetry('rollout', log);
  // First: a bad connection setting fails here, before any sandbox is touched.
  const { connection, namespace, dataConverter } = await connectWorker(log);
  const timing = leaseTimingFromEnv();
  const sandboxes = new SandboxManager();
  observeSandboxes(() => sandboxes.stats());
  // The lease lives in the deployment's shared store (RATCHET_ARTIFACTS_URL: s3:// across hosts), so janitors on other hosts see it.
  const store = defaultStore();
  const leases = new LeaseStore(store);
  // The lease comes first: a janitor elsewhere must never see this worker's containers without one.
  const lease = new LeaseKeeper(leases, { workerId: sandboxes.workerId, host: sandboxes.workerId.split(':')[0]!, ttlMs: timing.ttlMs, renewMs: timing.renewMs, log });
  await lease.start();
  // Containers of an earlier worker that was killed -9 would otherwise hold memory until the janitor's next pass.
  const janitorOpts = { leases, selfId: sandboxes.workerId, intervalMs: timing.sweepMs, log, removeOwnLeftovers: () => sandboxes.removeLeftovers() };
  const swept = await sweep(sandboxes.docker, janitorOpts);
  log.info({ removed: swept.removed.length, kept: swept.kept }, 'swept sandboxes of workers whose lease lapsed');
  const janitor = startJanitor(sandboxes.docker, janitorOpts);

  // Each slot is a sandbox plus an agent loop: size it to the host's cores and memory. Counted in
  // rollouts: a chunk activity (src/activities/rolloutChunk.ts) takes one slot per rollout it runs.
  const slots = new RolloutSlots(Number(process.env.RATCHET_ROLLOUT_SLOTS ?? 4));
  const workerDeploymentOptions = rolloutWorkerDeployment();
  // A host that cannot run rollouts (Docker, the sandbox image, its task files) stops polling until its probe passes.
  const health = new HostHealth();
  const activities = createRolloutActivities({ store, sandboxes, slots, health });
  const host = hostname();
  const probeMs = Number(process.env.RATCHET_HOST_PROBE_S ?? 15) * 1000;
  const say = (rec: Pick<HostHealthRecord, 'healthy' | 'error' | 'since'>) => store.putJson(healthKey(sandboxes.workerId), { workerId: sandboxes.workerId, host, ...rec, checkedAt: new Date().toISOString() })
    .catch((err: unknown) => log.warn({ err: String(err) }, 'could not write this host\'s health record; the run shows waiting-for-rollout-workers without naming it'));
  let stopping = false;
  const stop = () => { stopping = true; };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
  try {
    await serveWhileHealthy({
      createWorker: async () => {
        // An activity (a chunk, or one rollout) is taken only when one of its rollouts can start at once:
        // one that cannot stays in the task queue, so its start-to-close measures work (src/rollouts/slots.ts).
        const admission = slots.admission();
        const w = await Worker.create({
          connection,
          namespace,
          dataConverter,
          taskQueue: TASK_QUEUES.rollout,
          ...(workerDeploymentOptions ? { workerDeploymentOptions } : {}),
          activities,
          tuner: admission.tuner,
          // Let in-flight rollouts notice cancellation and remove their sandboxes on shutdown.
          shutdownGraceTime: '10 seconds',
        }).catch((err: unknown) => {
          admission.close();
          throw err;
        });
        log.info({ taskQueue: TASK_QUEUES.rollout, slots: slots.size, workerId: sandboxes.workerId, build: workerDeploymentOptions?.version ?? 'unversioned' }, 'rollout worker started');
        return { run: () => w.run().finally(admission.close), shutdown: () => w.shutdown() };
      },
      health,
      probe: () => probeHost(sandboxes.docker, defaultImage(), health.targets),
      say,
      probeMs,
      stopping: () => stopping,
      host,
      log,
    });
  } finally {
    janitor.stop();
    await lease.release().catch((err: unknown) => log.warn({ err: String(err) }, 'could not release the worker lease; janitors remove its sandboxes once it expires'));
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
