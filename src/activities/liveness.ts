/**
 * Heartbeats that measure liveness, and a watchdog that stops them when progress stops.
 *
 * Every long activity (rollout, weight sync, eval) runs its work inside
 * `withLiveness`: the activity heartbeats on a timer, whatever the work is doing
 * (one slow model call, a long test run), with the newest progress as details.
 * The work reports progress (a model response, a tool result, an HTTP response)
 * with `live.progress(...)`. When none came for `stallMs`, the heartbeat stops and
 * the stall is logged, so Temporal's heartbeat timeout fires and the attempt is
 * retried: a hung activity, not only a dead worker, is replaced. One heartbeat
 * timeout later the work's `signal` aborts, so the hung attempt frees its slot and
 * its sandbox on this worker (its result would be ignored anyway).
 *
 * The Python trainer does the same in trainer/ratchet_trainer/liveness.py.
 */
import { Context } from '@temporalio/activity';
import type { LivenessConfig } from '../config/schema';
import type { Liveness } from '../shared/liveness';
import { componentLogger, type Logger } from '../shared/logger';

export type { Liveness } from '../shared/liveness';

export interface LivenessOptions {
  /** The activity, for the log line. */
  name: string;
  heartbeatEveryMs: number;
  /** No progress for this long is a stall. */
  stallMs: number;
  logger?: Logger;
  /**
   * Beat at once with `{ phase: 'started' }` (default). An activity whose heartbeat details carry
   * its progress (rolloutChunk) passes false: the bare details would replace an earlier attempt's
   * (the SDK sends a first beat at once, later ones throttled), and a beat costs the server a
   * write of the workflow's state.
   */
  beatAtStart?: boolean;
}

export class StalledError extends Error {
  constructor(name: string, stallMs: number, details: unknown) {
    super(`${name}: no progress for ${Math.round(stallMs / 1000)} s (last: ${JSON.stringify(details)}); heartbeats stopped and Temporal retries the attempt`);
    this.name = 'StalledError';
  }
}

const defaultLog = componentLogger('liveness');

/** The options for one activity kind, from the run config's `[liveness]` section. */
export function livenessOptions(name: string, cfg: Pick<LivenessConfig, 'heartbeat_every_s'>, stallS: number, logger?: Logger): LivenessOptions {
  return { name, heartbeatEveryMs: cfg.heartbeat_every_s * 1000, stallMs: stallS * 1000, logger };
}

function currentContext(): Context | undefined {
  try {
    return Context.current();
  } catch {
    return undefined; // a plain call (benchmark, script): the watchdog still runs, nothing to heartbeat
  }
}

/**
 * Runs `work` with timer heartbeats and a stall watchdog. Outside an activity the
 * watchdog still aborts a stalled `work` (there is no heartbeat to stop).
 */
export async function withLiveness<T>(opts: LivenessOptions, work: (live: Liveness) => Promise<T>): Promise<T> {
  const ctx = currentContext();
  const log = opts.logger ?? defaultLog;
  const stallAbort = new AbortController();
  const signal = ctx ? AbortSignal.any([ctx.cancellationSignal, stallAbort.signal]) : stallAbort.signal;
  let details: Record<string, unknown> = { phase: 'started' };
  let last = Date.now();
  let stalled = false;
  let abortTimer: NodeJS.Timeout | undefined;

  const beat = () => {
    try {
      ctx?.heartbeat(details);
    } catch (err) {
      log.warn({ activity: opts.name, err: (err as Error).message }, 'heartbeat failed; the next tick tries again');
    }
  };
  const tick = () => {
    if (stalled) return;
    const idleMs = Date.now() - last;
    if (idleMs > opts.stallMs) {
      stalled = true;
      clearInterval(timer);
      log.error({ activity: opts.name, stall_s: opts.stallMs / 1000, idle_s: Math.round(idleMs / 1000), last_progress: details },
        'no progress within the stall window; heartbeats stop so Temporal retries this activity');
      // Temporal has retried the attempt once its heartbeat timeout passes: then stop the hung work here.
      const graceMs = ctx?.info.heartbeatTimeoutMs ?? 0;
      abortTimer = setTimeout(() => stallAbort.abort(new StalledError(opts.name, opts.stallMs, details)), graceMs);
      return;
    }
    beat();
  };
  const timer = setInterval(tick, opts.heartbeatEveryMs);
  if (opts.beatAtStart !== false) beat();

  const live: Liveness = {
    progress(next) {
      if (stalled) return; // the verdict stands: the attempt is being retried elsewhere
      last = Date.now();
      if (next) details = next;
    },
    signal,
    get stalled() { return stalled; },
  };
  // A hung await that ignores the signal must not hold the slot: the abort ends the attempt either way.
  const aborted = new Promise<never>((_, reject) => {
    stallAbort.signal.addEventListener('abort', () => reject(stallAbort.signal.reason as Error), { once: true });
  });
  aborted.catch(() => { /* observed through the race below */ });
  try {
    return await Promise.race([work(live), aborted]);
  } finally {
    clearInterval(timer);
    if (abortTimer) clearTimeout(abortTimer);
  }
}

/** How often a light activity that does not heartbeat itself beats (the LIGHT proxy's heartbeat timeout is 1 minute). */
export const LIGHT_BEAT_MS = 10_000;

/**
 * Every activity of `acts` heartbeats every `everyMs` while it runs, until it heartbeats itself
 * (withLiveness: from then on its own beats, and its stall watchdog, decide). Without this the light
 * activities had no heartbeat and a killed main worker stalled the run for their whole start-to-close
 * timeout (10 minutes a kill) with no status (issue 39, hole 11). Liveness only: a light activity that
 * hangs is bounded by its start-to-close timeout, as before.
 */
export function beatWhileRunning<T extends Record<string, (...args: never[]) => Promise<unknown>>>(acts: T, everyMs = LIGHT_BEAT_MS): T {
  const out: Record<string, (...args: never[]) => Promise<unknown>> = {};
  for (const [name, fn] of Object.entries(acts)) {
    out[name] = async (...args: never[]) => {
      const ctx = currentContext();
      if (!ctx) return fn(...args);
      let own = false;
      const heartbeat = ctx.heartbeat.bind(ctx);
      // The SDK's heartbeat is a readonly field of this activity's Context: wrapped here to see the activity's own beats.
      (ctx as { heartbeat: (details?: unknown) => void }).heartbeat = (details?: unknown) => { own = true; heartbeat(details); };
      heartbeat({ phase: 'started' });
      const timer = setInterval(() => { if (!own) heartbeat({ phase: 'running' }); }, everyMs);
      try {
        return await fn(...args);
      } finally {
        clearInterval(timer);
      }
    };
  }
  return out as T;
}
