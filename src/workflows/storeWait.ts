/**
 * Waiting out an unreachable artifact store. Workflow code.
 */
import { ActivityFailure, ApplicationFailure, log, sleep } from '@temporalio/workflow';
import type { RunControl } from './runControl';

/**
 * Runs an activity call; while the artifact store is unreachable (StoreUnavailable)
 * the run waits with status `waiting-for-store` and tries again, never failing
 * and losing nothing (every write is atomic and keyed, so a retry redoes it whole).
 * With the store up this adds no command: replay of older histories is unchanged.
 */
export async function untilStore<T>(run: RunControl, call: () => Promise<T>): Promise<T> {
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
