/**
 * Waiting out an unreachable artifact store. Workflow code.
 */
import { ActivityFailure, ApplicationFailure, log, patched, sleep } from '@temporalio/workflow';
import { PATCHES } from './patches';
import type { RunControl } from './runControl';

/**
 * Runs an activity call; while the artifact store is unreachable (StoreUnavailable)
 * the run waits with status `waiting-for-store` and tries again, never failing
 * and losing nothing (every write is atomic and keyed, so a retry redoes it whole).
 *
 * Behind patched(): the wrapper adds no command, but its awaits resolve the call a few
 * microtasks later, which reorders commands against an update handler that runs in the
 * same activation (a stop arriving as recordStep completes). A history recorded without
 * the marker gets the call's own promise back, untouched, and replays as recorded.
 */
export function untilStore<T>(run: RunControl, call: () => Promise<T>): Promise<T> {
  if (!patched(PATCHES.storeWait)) return call();
  return waitForStore(run, call);
}

async function waitForStore<T>(run: RunControl, call: () => Promise<T>): Promise<T> {
  for (let wait = 2; ; wait = Math.min(wait * 2, 30)) {
    try {
      const r = await call();
      if (run.setWaitingForStore(false)) log.info('the artifact store is back; the run goes on');
      return r;
    } catch (err) {
      if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'StoreUnavailable')) throw err;
      if (run.setWaitingForStore(true)) log.warn('the artifact store is unreachable; the run waits for it', { error: err.cause.message });
      await sleep(`${wait} seconds`);
    }
  }
}
