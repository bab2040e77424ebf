import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { paths, REPO_ROOT } from '../shared/paths';
import { logFile, serviceStatus, ServiceSpec, ServiceStartError, startService, stopService } from './processes';
import { livenessFileOf, STALE_ENV } from './supervisor';

export { formatDoctor, runDoctor } from './doctor';
export type { CheckResult } from './doctor';
export { ServiceStartError } from './processes';

const run = promisify(execFile);

/**
 * The local stack, in start order. Infrastructure (dockerd, Temporal, inference)
 * starts through its infra/ script, which owns install and health checks; the
 * Ratchet workers start here as background processes.
 */
const INFRA = [
  { name: 'dockerd', script: 'infra/docker.sh', log: 'dockerd' },
  { name: 'temporal', script: 'infra/temporal.sh', log: 'temporal' },
  { name: 'inference', script: 'infra/inference.sh', log: 'vllm' },
] as const;

export function workerSpecs(): ServiceSpec[] {
  const node = process.execPath;
  const dist = path.join(REPO_ROOT, 'dist', 'workers');
  return [
    { name: 'worker-main', command: node, args: [path.join(dist, 'main.js')], cwd: REPO_ROOT, env: { RATCHET_LIVENESS_FILE: livenessFileOf('worker-main') }, minUptimeMs: 4_000, readyTimeoutMs: 60_000 },
    { name: 'worker-rollout', command: node, args: [path.join(dist, 'rollout.js')], cwd: REPO_ROOT, env: { RATCHET_LIVENESS_FILE: livenessFileOf('worker-rollout') }, minUptimeMs: 4_000, readyTimeoutMs: 60_000 },
    {
      name: 'worker-trainer',
      command: path.join(paths.venv('trainer'), 'bin', 'python'),
      args: ['-m', 'ratchet_trainer.worker'],
      cwd: path.join(REPO_ROOT, 'trainer'),
      env: { PYTHONUNBUFFERED: '1', RATCHET_LIVENESS_FILE: livenessFileOf('worker-trainer') },
      minUptimeMs: 8_000,
      readyTimeoutMs: 120_000,
    },
  ];
}

/** Replaces a worker that died or whose liveness went stale (src/stack/supervisor.ts); started after the workers. */
export function supervisorSpec(): ServiceSpec {
  return {
    name: 'supervisor',
    command: process.execPath,
    args: [path.join(REPO_ROOT, 'dist', 'stack', 'supervise.js')],
    cwd: REPO_ROOT,
    env: process.env[STALE_ENV] ? { [STALE_ENV]: process.env[STALE_ENV] } : {},
    minUptimeMs: 2_000,
    readyTimeoutMs: 20_000,
  };
}

export interface UpEvent {
  component: string;
  state: 'started' | 'already-running' | 'stopped' | 'not-running';
  log: string;
}

async function infraScript(script: string, verb: string, log: string): Promise<void> {
  try {
    await run('bash', [path.join(REPO_ROOT, script), verb], { cwd: REPO_ROOT, timeout: 15 * 60_000 });
  } catch (err) {
    const stderr = ((err as { stderr?: string }).stderr ?? '').trim();
    throw new ServiceStartError(`${script} ${verb} failed:\n${stderr || (err as Error).message}\nLog: ${logFile(log)}`, logFile(log));
  }
}

/** Starts everything in the background. Running twice is harmless. */
export async function stackUp(onEvent: (e: UpEvent) => void = () => {}): Promise<UpEvent[]> {
  const events: UpEvent[] = [];
  const emit = (e: UpEvent) => { events.push(e); onEvent(e); };
  for (const svc of INFRA) {
    await infraScript(svc.script, 'start', svc.log);
    emit({ component: svc.name, state: 'started', log: logFile(svc.log) });
  }
  for (const spec of workerSpecs()) {
    if (!existsSync(spec.args[0]!) && spec.command === process.execPath) {
      throw new ServiceStartError(`${spec.name}: ${spec.args[0]} is missing. Fix: npm run build`, logFile(spec.name));
    }
    const state = await startService(spec);
    emit({ component: spec.name, state, log: logFile(spec.name) });
  }
  const sup = supervisorSpec();
  emit({ component: sup.name, state: await startService(sup), log: logFile(sup.name) });
  return events;
}

/** Stops the workers, inference and Temporal (its SQLite file stays). dockerd keeps running. */
export async function stackDown(onEvent: (e: UpEvent) => void = () => {}): Promise<UpEvent[]> {
  const events: UpEvent[] = [];
  // The supervisor first: it would otherwise restart the workers as they stop.
  for (const spec of [supervisorSpec(), ...[...workerSpecs()].reverse()]) {
    const state = await stopService(spec.name);
    const e = { component: spec.name, state, log: logFile(spec.name) };
    events.push(e); onEvent(e);
  }
  for (const svc of [...INFRA].reverse()) {
    if (svc.name === 'dockerd') continue; // other tenants may use it; leaving it up costs nothing
    await infraScript(svc.script, 'stop', svc.log);
    const e: UpEvent = { component: svc.name, state: 'stopped', log: logFile(svc.log) };
    events.push(e); onEvent(e);
  }
  return events;
}

export function workerStatus(): { name: string; running: boolean; pid?: number; log: string }[] {
  return [...workerSpecs(), supervisorSpec()].map((s) => ({ name: s.name, ...serviceStatus(s.name) }));
}
