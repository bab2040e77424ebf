import { spawn } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import * as net from 'node:net';
import * as path from 'node:path';
import { paths } from '../shared/paths';
import { isAlive, pidFile, readPid } from '../shared/pidFiles';

/**
 * A tiny process supervisor for the local stack: background processes with a
 * pid file under .ratchet/run and a log under .ratchet/logs. Enough for one
 * machine; a real deployment runs the same commands under systemd or k8s.
 */
export interface ServiceSpec {
  name: string;
  command: string;
  args: string[];
  cwd?: string;
  env?: NodeJS.ProcessEnv;
  /** A TCP port the service listens on: checked free before start and open after. */
  port?: number;
  /** How long the service may take to become ready. */
  readyTimeoutMs?: number;
  /** Extra readiness probe (e.g. an HTTP health check). */
  ready?: () => Promise<boolean>;
  /** A service with no port counts as started once it has stayed up this long. */
  minUptimeMs?: number;
}

export function logFile(name: string): string {
  return path.join(paths.logs(), `${name}.log`);
}

export function portOpen(port: number, host = '127.0.0.1', timeoutMs = 500): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    const done = (open: boolean) => {
      socket.destroy();
      resolve(open);
    };
    socket.setTimeout(timeoutMs, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}

export class ServiceStartError extends Error {
  constructor(message: string, readonly log: string) {
    super(message);
    this.name = 'ServiceStartError';
  }
}

function tail(file: string, lines = 15): string {
  try {
    return readFileSync(file, 'utf8').trimEnd().split('\n').slice(-lines).join('\n');
  } catch {
    return '(no log written)';
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Starts the service unless it already runs. Returns 'started' or 'already-running'. */
export async function startService(spec: ServiceSpec): Promise<'started' | 'already-running'> {
  if (isAlive(readPid(spec.name))) return 'already-running';
  const log = logFile(spec.name);
  if (spec.port !== undefined && (await portOpen(spec.port))) {
    throw new ServiceStartError(
      `${spec.name}: port ${spec.port} is already taken by another process. ` +
        `Fix: stop it (ss -ltnp 'sport = :${spec.port}') or free the port, then run ratchet up again.`,
      log,
    );
  }
  mkdirSync(paths.run(), { recursive: true });
  mkdirSync(paths.logs(), { recursive: true });
  const fd = openSync(log, 'a');
  const child = spawn(spec.command, spec.args, {
    cwd: spec.cwd,
    env: { ...process.env, ...spec.env },
    detached: true,
    stdio: ['ignore', fd, fd],
  });
  closeSync(fd);
  if (child.pid === undefined) throw new ServiceStartError(`${spec.name}: could not spawn ${spec.command}`, log);
  writeFileSync(pidFile(spec.name), String(child.pid));
  child.unref();

  const startedAt = Date.now();
  const deadline = startedAt + (spec.readyTimeoutMs ?? 30_000);
  while (Date.now() < deadline) {
    if (!isAlive(child.pid)) {
      rmSync(pidFile(spec.name), { force: true });
      throw new ServiceStartError(`${spec.name} exited during start. Its log, ${log}, ends with:\n${tail(log)}`, log);
    }
    const portReady = spec.port === undefined || (await portOpen(spec.port));
    const upLongEnough = Date.now() - startedAt >= (spec.minUptimeMs ?? 0);
    if (portReady && upLongEnough && (!spec.ready || (await spec.ready()))) return 'started';
    await sleep(500);
  }
  throw new ServiceStartError(`${spec.name} did not become ready in ${(spec.readyTimeoutMs ?? 30_000) / 1000} s. See ${log}`, log);
}

/** Stops the service's whole process group; harmless if it is not running. */
export async function stopService(name: string, graceMs = 10_000): Promise<'stopped' | 'not-running'> {
  const pid = readPid(name);
  if (!isAlive(pid)) {
    rmSync(pidFile(name), { force: true });
    return 'not-running';
  }
  // Off the books first: the supervisor (src/stack/supervisor.ts) restarts a service that has a pid file
  // and no process, and this one is meant to stop.
  const stopping = `${pidFile(name)}.stopping`;
  renameSync(pidFile(name), stopping);
  const signalGroup = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid!, sig);
    } catch {
      try { process.kill(pid!, sig); } catch { /* already gone */ }
    }
  };
  signalGroup('SIGTERM');
  const deadline = Date.now() + graceMs;
  while (isAlive(pid) && Date.now() < deadline) await sleep(200);
  if (isAlive(pid)) signalGroup('SIGKILL');
  rmSync(stopping, { force: true });
  return 'stopped';
}

export function serviceStatus(name: string): { running: boolean; pid?: number; log: string } {
  const pid = readPid(name);
  return { running: isAlive(pid), pid: isAlive(pid) ? pid : undefined, log: logFile(name) };
}

export function fileExists(p: string): boolean {
  return existsSync(p);
}
