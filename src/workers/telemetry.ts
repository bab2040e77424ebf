import * as net from 'node:net';
import { installRuntimeMetrics, startMetricsServer, type MetricsServer } from '../metrics';
import type { Logger } from '../shared/logger';

/**
 * Prometheus endpoints for one worker process: Ratchet's counters (prom-client)
 * and the Temporal SDK's runtime metrics (served by Core, in Rust, on its own
 * port). Each worker kind has default ports so several kinds share a host;
 * RATCHET_METRICS_PORT / RATCHET_SDK_METRICS_PORT override them, "off" disables
 * (0: any free port for Ratchet's; for the SDK's, which needs a fixed one, off).
 * Must run before the worker's NativeConnection is created.
 */
export const DEFAULT_METRICS_PORTS = {
  main: { ratchet: 9464, sdk: 9465 },
  rollout: { ratchet: 9466, sdk: 9467 },
} as const;

export interface WorkerTelemetry {
  ratchetUrl?: string;
  sdkUrl?: string;
  close(): Promise<void>;
}

function portFrom(envName: string, fallback: number): number | undefined {
  const raw = process.env[envName];
  if (raw === undefined || raw === '') return fallback;
  if (raw === 'off') return undefined;
  const port = Number(raw);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`${envName}=${JSON.stringify(raw)} is not a port. Fix: a number 1-65535, 0 for any free port, or "off"`);
  }
  return port;
}

/** Core's exporter cannot report a taken port back to us, so check first and say which variable moves it. */
async function assertFree(port: number, envName: string): Promise<void> {
  await new Promise<void>((resolve, reject) => {
    const probe = net.createServer();
    probe.once('error', () => reject(new Error(`metrics port 127.0.0.1:${port} is taken (another worker of this kind on this host?). ` +
      `Fix: set ${envName} to a free port, 0 for any, or "off"`)));
    probe.listen(port, '127.0.0.1', () => probe.close(() => resolve()));
  });
}

export async function startWorkerTelemetry(kind: keyof typeof DEFAULT_METRICS_PORTS, log: Logger): Promise<WorkerTelemetry> {
  const ratchetPort = portFrom('RATCHET_METRICS_PORT', DEFAULT_METRICS_PORTS[kind].ratchet);
  const sdkPort = portFrom('RATCHET_SDK_METRICS_PORT', DEFAULT_METRICS_PORTS[kind].sdk);
  let sdkUrl: string | undefined;
  if (sdkPort !== undefined && sdkPort !== 0) {
    await assertFree(sdkPort, 'RATCHET_SDK_METRICS_PORT');
    await installRuntimeMetrics(`127.0.0.1:${sdkPort}`);
    sdkUrl = `http://127.0.0.1:${sdkPort}/metrics`;
  }
  let server: MetricsServer | undefined;
  if (ratchetPort !== undefined) server = await startMetricsServer(ratchetPort);
  log.info({ ratchet: server?.url ?? 'off', sdk: sdkUrl ?? 'off' }, 'Prometheus metrics');
  return { ratchetUrl: server?.url, sdkUrl, close: async () => { await server?.close(); } };
}
