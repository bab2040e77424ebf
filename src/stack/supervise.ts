/**
 * The local stack's supervisor process (`ratchet up` starts it last, `ratchet down`
 * stops it first): every few seconds, restarts a worker or service that died and
 * kill -9s and restarts one whose liveness went stale (src/stack/supervisor.ts): the
 * workers by their liveness files, vLLM (each replica of a GPU layout, src/layout), the Temporal dev
 * server and dockerd by a health probe each (docs/liveness.md).
 *   node dist/stack/supervise.js
 * RATCHET_SUPERVISOR_STALE_S (default 60, 15-3600): how old a liveness file may get,
 * and how long a service may leave its probe unanswered.
 */
import { execFile } from 'node:child_process';
import { readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { Connection } from '@temporalio/client';
import Docker from 'dockerode';
import { componentLogger } from '../shared/logger';
import { paths, REPO_ROOT } from '../shared/paths';
import { inferenceSpecs, workerSpecs } from './index';
import { pidFile, readPid } from '../shared/pidFiles';
import { startService, type ServiceSpec } from './processes';
import { livenessFileOf, restartingFile, STALE_ENV, Supervisor, type Supervised } from './supervisor';

const run = promisify(execFile);

const log = componentLogger('supervisor');

export function staleAfterMs(raw = process.env[STALE_ENV]): number {
  if (raw === undefined || raw === '') return 60_000;
  const s = Number(raw);
  if (!Number.isFinite(s) || s < 15 || s > 3600) {
    throw new Error(`${STALE_ENV}=${JSON.stringify(raw)} is not a number of seconds in [15, 3600]. ` +
      'Fix: unset it (60 s) or give e.g. 120; it must exceed the workers\' 5-second liveness period by a wide margin');
  }
  return s * 1000;
}

export function supervised(spec: ServiceSpec, staleMs: number): Supervised {
  return {
    name: spec.name,
    pid: () => readPid(spec.name),
    startedAt: () => {
      try {
        return statSync(pidFile(spec.name)).mtimeMs;
      } catch {
        return undefined;
      }
    },
    livenessFile: livenessFileOf(spec.name),
    staleAfterMs: staleMs,
    startGraceMs: spec.readyTimeoutMs ?? 30_000,
    restart: async () => { await startService(spec); },
  };
}

function pidIn(file: string): number | undefined {
  try {
    const pid = Number(readFileSync(file, 'utf8').trim());
    return Number.isInteger(pid) && pid > 0 ? pid : undefined;
  } catch {
    return undefined;
  }
}

function mtimeOf(file: string): number | undefined {
  try {
    return statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/**
 * The Temporal server's gRPC health check over one kept connection. In-process, not the CLI: spawning a
 * 100 MB binary every pass costs CPU, and on a loaded, swapping host the spawn itself outlasted the
 * probe's timeout until the supervisor killed a server that was answering (05:40 on 2026-11-28).
 */
export function temporalHealthProbe(address: string, timeoutMs = 10_000): () => Promise<boolean> {
  let conn: Promise<Connection> | undefined;
  return async () => {
    try {
      conn ??= Connection.connect({ address, connectTimeout: timeoutMs });
      const c = await conn;
      const res = await c.withDeadline(Date.now() + timeoutMs, () => c.healthService.check({}));
      return res.status === 1; // SERVING
    } catch {
      const stale = conn;
      conn = undefined; // a restarted server needs a new connection
      stale?.then((c) => c.close()).catch(() => undefined);
      return false;
    }
  };
}

/** dockerd's ping through dockerode (as doctor and the rollout hosts' probe ask it), in-process like the Temporal probe. */
export function dockerPingProbe(socketPath?: string, timeoutMs = 15_000): () => Promise<boolean> {
  const docker = new Docker({ ...(socketPath ? { socketPath } : {}), timeout: timeoutMs });
  return async () => {
    try {
      await docker.ping();
      return true;
    } catch {
      return false;
    }
  };
}

/** Starts a service through its infra script (which owns its flags, pid file and health wait). */
async function infraStart(script: string, command = 'start'): Promise<void> {
  await run('bash', [path.join(REPO_ROOT, 'infra', script), command], { cwd: REPO_ROOT, timeout: 15 * 60_000 });
}

/**
 * The services the workers need, watched like the workers: a pid file says it should run (the infra
 * scripts' `stop` removes it: stopped on purpose) and a probe stands in for the liveness file.
 */
export function serviceSupervised(staleMs: number, env: NodeJS.ProcessEnv = process.env): Supervised[] {
  const vllmPid = path.join(env.RATCHET_RUN_DIR ?? paths.run(), 'vllm.pid');
  const vllmHealth = `http://${env.RATCHET_VLLM_HOST ?? '127.0.0.1'}:${env.RATCHET_VLLM_PORT ?? '8000'}/health`;
  const temporalPid = path.join(paths.run(), 'temporal.pid');
  const temporalAddress = `127.0.0.1:${env.RATCHET_TEMPORAL_PORT ?? '7233'}`;
  // dockerd writes its own pid file and removes it when it stops cleanly.
  const dockerPid = env.RATCHET_DOCKERD_PIDFILE ?? '/var/run/docker.pid';
  return [
    {
      name: 'inference', pid: () => pidIn(vllmPid), startedAt: () => mtimeOf(vllmPid), livenessFile: livenessFileOf('inference'),
      staleAfterMs: staleMs, startGraceMs: Number(env.RATCHET_VLLM_START_TIMEOUT ?? 300) * 1000,
      probe: async () => (await fetch(vllmHealth, { signal: AbortSignal.timeout(10_000) })).ok,
      // revive, not start: a stop that ran since the probe failed (a test, an operator) is not undone.
      restart: () => infraStart('inference.sh', 'revive'),
    },
    {
      name: 'temporal', pid: () => pidIn(temporalPid), startedAt: () => mtimeOf(temporalPid), livenessFile: livenessFileOf('temporal'),
      staleAfterMs: staleMs, startGraceMs: 60_000,
      probe: temporalHealthProbe(temporalAddress),
      restart: () => infraStart('temporal.sh', 'revive'),
    },
    {
      name: 'dockerd', pid: () => pidIn(dockerPid), startedAt: () => mtimeOf(dockerPid), livenessFile: livenessFileOf('dockerd'),
      staleAfterMs: staleMs, startGraceMs: 60_000,
      probe: dockerPingProbe(),
      restart: () => infraStart('docker.sh'),
    },
  ];
}

if (require.main === module) {
  try {
    const staleMs = staleAfterMs();
    // The services first: a worker restarted while its service is down only waits for it.
    // On a GPU layout (ratchet up --config) each vLLM replica is watched by its /health, like the CPU stack's vLLM.
    const replicas = inferenceSpecs().map((s) => ({ ...supervised(s, staleMs), probe: s.ready }));
    const entries = [...serviceSupervised(staleMs), ...replicas, ...workerSpecs().map((s) => supervised(s, staleMs))];
    const sup = new Supervisor(entries, { log, stateFile: restartingFile() }).start();
    log.info({ services: entries.map((s) => s.name), stale_after_s: staleMs / 1000 }, 'supervisor started');
    const stop = () => { sup.stop(); process.exit(0); };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'supervisor failed to start');
    process.exit(1);
  }
}
