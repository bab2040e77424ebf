/**
 * A rollout worker that serves only while its host is healthy (issue 39): the first host fault a
 * rollout meets (src/rollouts/hostHealth.ts) shuts the Temporal worker down, so it stops polling
 * and the chunk's retry goes to a healthy host or waits in the queue; the host is probed until it
 * can run rollouts again, then a new worker polls. Each change is logged and written to the host's
 * health record, which the run's watchdog reads (waiting-for-healthy-rollout-hosts).
 */
import type { HostHealth, HostHealthRecord } from '../rollouts/hostHealth';
import type { Logger } from '../shared/logger';

/** What of a Temporal Worker this needs. */
export interface ServingWorker {
  run(): Promise<void>;
  shutdown(): void;
}

export interface ServeWhileHealthy {
  createWorker: () => Promise<ServingWorker>;
  health: HostHealth;
  /** Undefined when the host can run rollouts again; else what is still wrong. */
  probe: () => Promise<string | undefined>;
  /** Writes the host's health record (never throws). */
  say: (rec: Pick<HostHealthRecord, 'healthy' | 'error' | 'since'>) => Promise<unknown>;
  probeMs: number;
  /** True once the process is asked to stop (SIGTERM): no new worker, no more probes. */
  stopping: () => boolean;
  host: string;
  log: Pick<Logger, 'info' | 'warn' | 'error'>;
}

export async function serveWhileHealthy(o: ServeWhileHealthy): Promise<void> {
  for (;;) {
    const worker = await o.createWorker();
    const off = o.health.onSick((error) => {
      o.log.error({ host: o.host, err: error }, 'rollout host out of service: it stops taking rollouts until its health probe passes');
      void o.say({ healthy: false, error, since: o.health.sick!.since });
      worker.shutdown();
    });
    try {
      await worker.run();
    } finally {
      off();
    }
    const sick = o.health.sick;
    if (o.stopping() || !sick) return;
    for (;;) {
      await new Promise((r) => setTimeout(r, o.probeMs));
      if (o.stopping()) return;
      const still = await o.probe();
      if (!still) break;
      o.log.warn({ host: o.host, err: still }, 'rollout host still out of service');
      await o.say({ healthy: false, error: still, since: sick.since });
    }
    o.log.info({ host: o.host, was: sick.error }, 'rollout host healthy again: it takes rollouts');
    o.health.markHealthy();
    await o.say({ healthy: true });
  }
}
