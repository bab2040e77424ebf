/**
 * The local stack's supervisor process (`ratchet up` starts it last, `ratchet down`
 * stops it first): every few seconds, restarts a worker that died and kill -9s and
 * restarts one whose liveness file went stale (src/stack/supervisor.ts).
 *   node dist/stack/supervise.js
 * RATCHET_SUPERVISOR_STALE_S (default 60, 15-3600): how old a liveness file may get.
 */
import { statSync } from 'node:fs';
import { componentLogger } from '../shared/logger';
import { workerSpecs } from './index';
import { pidFile, readPid, startService, type ServiceSpec } from './processes';
import { livenessFileOf, STALE_ENV, Supervisor, type Supervised } from './supervisor';

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

if (require.main === module) {
  try {
    const staleMs = staleAfterMs();
    const sup = new Supervisor(workerSpecs().map((s) => supervised(s, staleMs)), { log }).start();
    log.info({ services: workerSpecs().map((s) => s.name), stale_after_s: staleMs / 1000 }, 'supervisor started');
    const stop = () => { sup.stop(); process.exit(0); };
    process.on('SIGTERM', stop);
    process.on('SIGINT', stop);
  } catch (err) {
    log.fatal({ err: (err as Error).message }, 'supervisor failed to start');
    process.exit(1);
  }
}
