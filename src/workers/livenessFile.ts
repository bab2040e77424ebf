/**
 * The worker's liveness signal for src/stack/supervisor.ts: a file touched every
 * few seconds by a timer on the event loop. A frozen (SIGSTOP) or wedged process
 * (an event loop blocked by a runaway computation) stops touching it, and the
 * supervisor replaces the process. A stalled activity does not mark the worker
 * dead: its own watchdog (src/activities/liveness.ts) stops its heartbeat and
 * aborts it, and the worker goes on with the others.
 */
import { closeSync, mkdirSync, openSync, utimesSync } from 'node:fs';
import * as path from 'node:path';
import type { Logger } from '../shared/logger';

export const LIVENESS_FILE_ENV = 'RATCHET_LIVENESS_FILE';

export function touch(file: string): void {
  mkdirSync(path.dirname(file), { recursive: true });
  closeSync(openSync(file, 'a'));
  const now = new Date();
  utimesSync(file, now, now);
}

/** Starts touching $RATCHET_LIVENESS_FILE (nothing when unset); returns the stop function. */
export function startLivenessFile(log: Logger, file = process.env[LIVENESS_FILE_ENV], everyMs = 5_000): () => void {
  if (!file) return () => {};
  const beat = () => {
    try {
      touch(file);
    } catch (err) {
      log.warn({ file, err: (err as Error).message }, 'could not touch the liveness file; the supervisor will see it stale');
    }
  };
  beat();
  const timer = setInterval(beat, everyMs);
  timer.unref();
  log.info({ file, every_s: everyMs / 1000 }, 'liveness file');
  return () => clearInterval(timer);
}
