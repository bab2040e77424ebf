/**
 * Prometheus metrics for every worker: Ratchet's own counters on a prom-client
 * registry served by `startMetricsServer(port)`, beside the Temporal SDK's runtime
 * metrics, which Core serves itself on another port (`installRuntimeMetrics`).
 * Two ports because the SDK's exporter lives in Rust and cannot share a registry.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';

export const registry = new Registry();
collectDefaultMetrics({ register: registry, prefix: 'ratchet_process_' });

export const rolloutsTotal = new Counter({
  name: 'ratchet_rollouts_total',
  help: 'Finished rollouts, by environment and stop reason',
  labelNames: ['env', 'stop_reason'] as const,
  registers: [registry],
});

export const rolloutErrorsTotal = new Counter({
  name: 'ratchet_rollout_errors_total',
  help: 'Rollouts that failed with an error (before retry), by environment',
  labelNames: ['env'] as const,
  registers: [registry],
});

export const rolloutReward = new Histogram({
  name: 'ratchet_rollout_reward',
  help: 'Total reward per finished rollout',
  labelNames: ['env'] as const,
  buckets: [-2, -1, -0.5, -0.25, 0, 0.25, 0.5, 0.75, 1, 1.5, 2],
  registers: [registry],
});

export const rolloutSeconds = new Histogram({
  name: 'ratchet_rollout_seconds',
  help: 'Wall time of one rollout',
  labelNames: ['env'] as const,
  buckets: [1, 2, 5, 10, 20, 40, 80, 160, 320],
  registers: [registry],
});

let sandboxProbe: (() => { warm: number; busy: number }) | undefined;
/** The rollout worker hands its sandbox manager's counts here; they are read at each scrape. */
export function observeSandboxes(probe: () => { warm: number; busy: number }): void {
  sandboxProbe = probe;
}

export const sandboxPool = new Gauge({
  name: 'ratchet_sandbox_pool',
  help: 'Sandbox containers by state (warm = started and idle, busy = running a rollout)',
  labelNames: ['state'] as const,
  registers: [registry],
  collect() {
    if (!sandboxProbe) return;
    const s = sandboxProbe();
    this.set({ state: 'warm' }, s.warm);
    this.set({ state: 'busy' }, s.busy);
  },
});

export const trainerStepSeconds = new Histogram({
  name: 'ratchet_trainer_step_seconds',
  help: 'Trainer step wall time as the workflow saw it',
  buckets: [0.5, 1, 2, 5, 10, 20, 40, 80, 160, 320, 640],
  registers: [registry],
});

export const stepsTotal = new Counter({
  name: 'ratchet_steps_total',
  help: 'Finished training steps',
  registers: [registry],
});

export const lastMeanReward = new Gauge({
  name: 'ratchet_last_mean_reward',
  help: 'Mean reward of the last finished step, by run',
  labelNames: ['run'] as const,
  registers: [registry],
});

export const evalEpisodesTotal = new Counter({
  name: 'ratchet_eval_episodes_total',
  help: 'Evaluation episodes recorded by EvalSweep',
  registers: [registry],
});

export interface MetricsServer {
  port: number;
  url: string;
  close(): Promise<void>;
}

/** Serves GET /metrics (and /healthz) on 127.0.0.1:<port>; port 0 picks a free one. */
export async function startMetricsServer(port: number, host = '127.0.0.1'): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    if (req.url === '/metrics') {
      registry.metrics().then((body) => {
        res.writeHead(200, { 'Content-Type': registry.contentType });
        res.end(body);
      }, (err: Error) => {
        res.writeHead(500);
        res.end(err.message);
      });
    } else if (req.url === '/healthz') {
      res.writeHead(200).end('ok');
    } else {
      res.writeHead(404).end('try /metrics');
    }
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', (err: NodeJS.ErrnoException) => reject(err.code === 'EADDRINUSE'
      ? new Error(`metrics port ${host}:${port} is taken. Fix: set RATCHET_METRICS_PORT to a free port (or 0 for any)`) : err));
    server.listen(port, host, resolve);
  });
  const actual = (server.address() as AddressInfo).port;
  return {
    port: actual,
    url: `http://${host}:${actual}/metrics`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}

/**
 * Telemetry options for `Runtime.install(...)`: the Temporal SDK's own metrics
 * (task slots, poll latencies, activity/workflow timings) in Prometheus format.
 * Call once per process, before any Worker or NativeConnection is created.
 */
export function runtimeTelemetryOptions(bindAddress: string) {
  return { metrics: { prometheus: { bindAddress } } };
}

/** Installs the SDK runtime with Prometheus metrics; the worker entry points call this first. */
export async function installRuntimeMetrics(bindAddress: string): Promise<void> {
  const { Runtime } = await import('@temporalio/worker');
  Runtime.install({ telemetryOptions: runtimeTelemetryOptions(bindAddress) });
}
