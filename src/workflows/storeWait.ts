/**
 * Waiting out an unreachable artifact store. Workflow code.
 */
import {
  ActivityFailure, ApplicationFailure, deprecatePatch, log, proxyActivities, sleep, type ActivityInterfaceFor, type ActivityOptions,
} from '@temporalio/workflow';
import type { OutageCall, OutageWaitLimits } from '../contracts/outage';
import { DEFAULT_HANDOFF_AFTER, DISK_WAIT_CAP_S, STORE_WAIT_CAP_S, handOff } from './outageWait';
import { DEPRECATED_PATCHES } from './patches';
import type { RunControl } from './runControl';

export { DISK_WAIT_CAP_S } from './outageWait';

/**
 * Who shows a store/disk wait: TrainRun's RunControl, or StepRollouts, which reports it to its
 * parent. The setters answer whether the flag changed.
 */
export interface OutageWaiter {
  setWaitingForStore(on: boolean): boolean;
  setWaitingForDisk(on: boolean): boolean;
  outageLimits: OutageWaitLimits | undefined;
  /** OutageWait children started by this execution (their workflow ids count them). */
  outageHandoffs: number;
}

/**
 * Runs an activity call; while the artifact store is unreachable (StoreUnavailable)
 * the run waits with status `waiting-for-store` and tries again, never failing
 * and losing nothing (every write is atomic and keyed, so a retry redoes it whole).
 * A full disk (DiskFull, from a store write or trainer.save) waits the same way, with
 * status `waiting-for-disk`, until an operator frees space.
 *
 * A wait that outlasts `handoffAfter` tries hands `handoff` (the same call, as data) to an
 * OutageWait child workflow, which continues as new while the outage lasts (outageWait.ts):
 * this history then grows by one child, however long the outage. Without `handoff` the
 * wait stays here.
 */
export function untilStore<T>(run: OutageWaiter, call: () => Promise<T>, handoff?: OutageCall): Promise<T> {
  deprecatePatch(DEPRECATED_PATCHES.storeWait);
  return waitForStore(run, call, handoff);
}

/** untilStore for a waiter that is not a RunControl (StepRollouts, which reports the wait to its parent). */
export async function waitForStore<T>(run: OutageWaiter, call: () => Promise<T>, handoff: OutageCall | undefined): Promise<T> {
  // A full disk waits for a person, so its polls are sparser (to 2 minutes).
  let forDisk = false;
  const limits = run.outageLimits;
  const cap = () => limits?.capS ?? (forDisk ? DISK_WAIT_CAP_S : STORE_WAIT_CAP_S);
  for (let wait = 2, failed = 0; ; wait = Math.min(wait * 2, cap())) {
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
      } else if (type === 'DiskFull') {
        deprecatePatch(DEPRECATED_PATCHES.diskWait);
        forDisk = true;
        if (run.setWaitingForStore(false)) log.info('the artifact store is back');
        if (run.setWaitingForDisk(true)) log.warn('a disk is full; the run waits for space', { error: (err as ActivityFailure).cause!.message });
      } else {
        throw err;
      }
      if (handoff && ++failed >= (limits?.handoffAfter ?? DEFAULT_HANDOFF_AFTER)) {
        deprecatePatch(DEPRECATED_PATCHES.outageHandoff);
        const r = await handOff<T>(handoff, forDisk ? 'DiskFull' : 'StoreUnavailable', wait, limits, run.outageHandoffs++);
        if (run.setWaitingForStore(false)) log.info('the artifact store is back; the run goes on');
        if (run.setWaitingForDisk(false)) log.info('the disk has space again; the run goes on');
        return r;
      }
      await sleep(`${wait} seconds`);
    }
  }
}

/**
 * proxyActivities(options) whose every call goes through untilStore, with the call itself as
 * the hand-off: `patientActivities<LightActivities>(run, LIGHT).recordStep(req)`.
 */
export function patientActivities<A extends object>(run: OutageWaiter, options: ActivityOptions): ActivityInterfaceFor<A> {
  const direct = proxyActivities<Record<string, (...args: unknown[]) => Promise<unknown>>>(options);
  return new Proxy({}, {
    get: (_target, activity) => {
      if (typeof activity !== 'string') return undefined;
      return (...args: unknown[]) => untilStore(run, () => direct[activity]!(...args), { activity, options, args });
    },
  }) as ActivityInterfaceFor<A>;
}

/**
 * The run as the waiter of a call that runs beside its others (a trainer loading while rollouts run): the call
 * shows the waits it meets and clears only those. A success of its own does not say that the store or disk a
 * rollout is waiting for is back.
 */
export function besideOthers(run: RunControl): OutageWaiter {
  let store = false;
  let disk = false;
  return {
    setWaitingForStore(on) {
      if (!on && !store) return false;
      store = on;
      return run.setWaitingForStore(on);
    },
    setWaitingForDisk(on) {
      if (!on && !disk) return false;
      disk = on;
      return run.setWaitingForDisk(on);
    },
    get outageLimits() { return run.outageLimits; },
    get outageHandoffs() { return run.outageHandoffs; },
    set outageHandoffs(n: number) { run.outageHandoffs = n; },
  };
}
