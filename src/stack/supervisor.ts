/**
 * Replaces a stack process that died or stopped being live: the workers, and the services they need
 * (vLLM, the Temporal dev server, dockerd). A process frozen by
 * SIGSTOP, or wedged in a deadlock, cannot run its own watchdog: its activities'
 * heartbeats stop and Temporal times them out, but the process keeps its queue and
 * its model, and a run waits for it forever. Each worker touches a liveness file
 * while it is live (the trainer: only while no activity is stalled,
 * trainer/ratchet_trainer/liveness.py; the TS workers: while their event loop
 * runs, src/workers/livenessFile.ts). The supervisor kill -9s a process whose file
 * went stale and starts it again, and starts again one that died. A service that
 * touches no file of its own is probed instead (vLLM's /health, `docker info`, the
 * Temporal server's health check): each answer touches the file for it, so a service
 * that stops answering goes stale by the same rule (issue 42).
 *
 * A service stopped on purpose (`ratchet down`, stopService) has no pid file and is
 * left alone. In production the same signal drives systemd's WatchdogSec or a
 * Kubernetes liveness probe (docs/liveness.md).
 */
import { closeSync, mkdirSync, openSync, readFileSync, renameSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../shared/logger';
import { paths } from '../shared/paths';
import { isAlive } from '../shared/pidFiles';

export const STALE_ENV = 'RATCHET_SUPERVISOR_STALE_S';

/** Where a stack service touches its liveness file ($RATCHET_LIVENESS_FILE). */
export function livenessFileOf(name: string): string {
  return path.join(paths.run(), `${name}.alive`);
}

export interface Supervised {
  name: string;
  /** The pid that should be running, or undefined when the service was stopped on purpose. */
  pid(): number | undefined;
  /** When that process started (ms since epoch): liveness is not judged during its start grace. */
  startedAt(): number | undefined;
  livenessFile: string;
  /** Older than this, the liveness file says the process is frozen or wedged. */
  staleAfterMs: number;
  /** A process this young may not have touched its file yet (a trainer loads torch first). */
  startGraceMs: number;
  /** Starts the service again (the dead or killed process is gone by then). */
  restart(): Promise<void>;
  /**
   * For a service that touches no liveness file itself: a health check, asked every pass while the
   * process lives; each true touches livenessFile for it. False, a throw or a hang (the probe's own
   * timeout) touch nothing, so a service that stops answering goes stale like a frozen worker.
   */
  probe?: () => Promise<boolean>;
}

/** What the supervisor is bringing back right now, by service (its state file; `ratchet status` shows it). */
export type Restarting = Record<string, { reason: 'died' | 'stale'; since: string; error?: string }>;

/** Where the stack's supervisor says what it is restarting. */
export const restartingFile = (): string => path.join(paths.run(), 'supervisor-restarting.json');

/** What `ratchet status` adds while the supervisor brings services back: '' when it brings none. */
export function restartingNote(r: Restarting, now = Date.now()): string {
  const items = Object.entries(r).map(([name, s]) =>
    `${name} (${s.reason === 'stale' ? 'hung' : 'died'} ${Math.max(0, Math.round((now - Date.parse(s.since)) / 1000))} s ago${s.error ? `; last try failed: ${s.error.split('\n')[0]}` : ''})`);
  return items.length ? `the stack's supervisor is restarting ${items.join(', ')}` : '';
}

/** The services the supervisor is restarting now, from its state file; {} when none (or no supervisor). */
export function readRestarting(file: string = restartingFile()): Restarting {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as Restarting;
  } catch {
    return {};
  }
}

function touch(file: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  closeSync(openSync(file, 'a'));
  const t = new Date();
  utimesSync(file, t, t);
}

export type SupervisorAction =
  | { name: string; action: 'restarted'; reason: 'died' | 'stale'; ageMs?: number }
  | { name: string; action: 'restart-failed'; reason: 'died' | 'stale'; error: string };

function fileAgeMs(file: string, now: number): number | undefined {
  try {
    return now - statSync(file).mtimeMs;
  } catch {
    return undefined;
  }
}

/** kill -9 the process group (the services start detached, as group leaders), else the process. */
export function killHard(pid: number): void {
  try {
    process.kill(-pid, 'SIGKILL');
  } catch {
    try { process.kill(pid, 'SIGKILL'); } catch { /* already gone */ }
  }
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

export class Supervisor {
  private timer: NodeJS.Timeout | undefined;
  private checking = false;

  constructor(
    private readonly entries: Supervised[],
    private readonly opts: {
      log: Logger; checkEveryMs?: number; now?: () => number; onAction?: (a: SupervisorAction) => void;
      /** Where to say which services are being restarted (readRestarting); none: not said. */
      stateFile?: string;
    },
  ) {}

  private restarting: Restarting = {};

  private saveRestarting(): void {
    const file = this.opts.stateFile;
    if (!file) return;
    try {
      writeFileSync(`${file}.tmp`, JSON.stringify(this.restarting));
      renameSync(`${file}.tmp`, file);
    } catch (err) {
      this.opts.log.warn({ err: (err as Error).message, file }, 'could not write the supervisor\'s state file');
    }
  }

  /** One pass over every service; returns what it did. */
  async checkOnce(): Promise<SupervisorAction[]> {
    const actions: SupervisorAction[] = [];
    for (const e of this.entries) {
      const pid = e.pid();
      if (pid === undefined) { // stopped on purpose
        if (this.restarting[e.name]) { delete this.restarting[e.name]; this.saveRestarting(); }
        continue;
      }
      const now = (this.opts.now ?? Date.now)();
      let reason: 'died' | 'stale' | undefined;
      let ageMs: number | undefined;
      if (!isAlive(pid)) {
        reason = 'died';
      } else {
        if (e.probe && await e.probe().catch(() => false)) touch(e.livenessFile);
        const started = e.startedAt() ?? now;
        ageMs = fileAgeMs(e.livenessFile, now);
        // A file older than this process belongs to its predecessor: count from the start instead.
        const sinceLive = ageMs === undefined || now - ageMs < started ? now - started - e.startGraceMs : ageMs;
        if (sinceLive > e.staleAfterMs) reason = 'stale';
      }
      if (!reason) continue;
      if (reason === 'stale') {
        this.opts.log.error({ service: e.name, pid, liveness_file: e.livenessFile, age_s: ageMs === undefined ? null : Math.round(ageMs / 1000), stale_after_s: e.staleAfterMs / 1000 },
          'liveness went stale (frozen or wedged); kill -9 and restart');
        killHard(pid);
        for (let i = 0; i < 50 && isAlive(pid); i++) await sleep(100);
      } else {
        this.opts.log.error({ service: e.name, pid }, 'process died; restarting');
      }
      let action: SupervisorAction;
      this.restarting[e.name] = { ...this.restarting[e.name], reason, since: this.restarting[e.name]?.since ?? new Date(now).toISOString() };
      this.saveRestarting();
      try {
        await e.restart();
        action = { name: e.name, action: 'restarted', reason, ...(ageMs !== undefined ? { ageMs } : {}) };
        this.opts.log.info({ service: e.name, reason }, 'service restarted');
        delete this.restarting[e.name];
      } catch (err) {
        action = { name: e.name, action: 'restart-failed', reason, error: (err as Error).message };
        this.opts.log.error({ service: e.name, reason, err: (err as Error).message }, 'restart failed; the next pass tries again');
        this.restarting[e.name]!.error = (err as Error).message.slice(0, 300);
      }
      this.saveRestarting();
      actions.push(action);
      this.opts.onAction?.(action);
    }
    return actions;
  }

  start(): this {
    const every = this.opts.checkEveryMs ?? 5_000;
    this.timer = setInterval(() => {
      if (this.checking) return; // a restart (a trainer's start) can outlast one period
      this.checking = true;
      this.checkOnce().catch((err: unknown) => this.opts.log.error({ err: String(err) }, 'supervisor pass failed'))
        .finally(() => { this.checking = false; });
    }, every);
    return this;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }
}
