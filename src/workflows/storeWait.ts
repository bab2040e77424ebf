/**
 * Waiting out an unreachable artifact store. Workflow code.
 */
import { ActivityFailure, ApplicationFailure, log, patched, sleep } from '@temporalio/workflow';
import { PATCHES } from './patches';
import type { RunControl } from './runControl';

/** The longest pause between tries while a disk is full, in seconds. */
export const DISK_WAIT_CAP_S = 120;

/**
 * Runs an activity call; while the artifact store is unreachable (StoreUnavailable)
 * the run waits with status `waiting-for-store` and tries again, never failing
 * and losing nothing (every write is atomic and keyed, so a retry redoes it whole).
 * A full disk (DiskFull, from a store write or trainer.save) waits the same way, with
 * status `waiting-for-disk`, until an operator frees space.
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
  // A full disk waits for a person, so its polls are sparser (to 2 minutes): a wait of days
  // adds ~8k history events a day instead of ~30k (these waits do not continue as new).
  let forDisk = false;
  for (let wait = 2; ; wait = Math.min(wait * 2, forDisk ? DISK_WAIT_CAP_S : 30)) {
    try {
      const r = await call();
      if (run.setWaitingForStore(false)) log.info('the artifact store is back; the run goes on');
      if (run.setWaitingForDisk(false)) log.info('the disk has space again; the run goes on');
      return r;
    } catch (err) {
      const type = err instanceof ActivityFailure && err.cause instanceof ApplicationFailure ? err.cause.type : undefined;
      if (type === 'StoreUnavailable') {
        forDisk = false;
        if (run.setWaitingForDisk(false)) log.info('the disk has space again');
        if (run.setWaitingForStore(true)) log.warn('the artifact store is unreachable; the run waits for it', { error: (err as ActivityFailure).cause!.message });
      // patched() only where a DiskFull arrives: a history recorded before it failed the run there, and replays so.
      } else if (type === 'DiskFull' && patched(PATCHES.diskWait)) {
        forDisk = true;
        if (run.setWaitingForStore(false)) log.info('the artifact store is back');
        if (run.setWaitingForDisk(true)) log.warn('a disk is full; the run waits for space', { error: (err as ActivityFailure).cause!.message });
      } else {
        throw err;
      }
      await sleep(`${wait} seconds`);
    }
  }
}
