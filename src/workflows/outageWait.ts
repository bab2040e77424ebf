/**
 * OutageWait: the long tail of a wait for an operator-fixable fault (artifact store
 * unreachable, disk full), in its own workflow that continues as new. Workflow code.
 *
 * A run waits out such a fault by calling the activity again after a pause
 * (storeWait.ts). Each try adds ~11 events to the history that waits, so an outage of
 * days in a step's middle would push one history toward Temporal's 51,200-event limit.
 * The step's own state (rollouts done, a step trained but not saved) cannot be carried
 * across the run's continue-as-new, so after a few tries the caller hands the call
 * itself (activity name, options, input: plain data) to this child workflow: it keeps
 * trying, continues as new every `perExecution` tries, and returns the activity's
 * result. The caller's history holds one child start and its result, however long
 * the outage; every execution of the child holds a bounded number of events.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  ChildWorkflowFailure,
  continueAsNew,
  executeChild,
  log,
  proxyActivities,
  sleep,
  workflowInfo,
  type ActivityOptions,
} from '@temporalio/workflow';
import { OUTAGE_TYPES, type OutageCall, type OutageType, type OutageWaitInput, type OutageWaitLimits } from '../contracts/outage';

export const DEFAULT_HANDOFF_AFTER = 10;
export const DEFAULT_TRIES_PER_EXECUTION = 100;
export const STORE_WAIT_CAP_S = 30;
/** A full disk waits for a person: sparser tries. */
export const DISK_WAIT_CAP_S = 120;

/** The outage type an activity failure is, or undefined. */
export function outageOf(err: unknown): OutageType | undefined {
  if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure)) return undefined;
  return (OUTAGE_TYPES as readonly string[]).includes(err.cause.type ?? '') ? (err.cause.type as OutageType) : undefined;
}

export const capFor = (fault: OutageType, limits?: OutageWaitLimits): number =>
  limits?.capS ?? (fault === 'DiskFull' ? DISK_WAIT_CAP_S : STORE_WAIT_CAP_S);

/** `proxy[activity](...args)` as data: the same call a workflow makes through proxyActivities<A>(options). */
export function callOf<A extends object, K extends keyof A & string>(
  options: ActivityOptions, activity: K, ...args: A[K] extends (...a: infer P) => unknown ? P : never): OutageCall {
  return { activity, options, args };
}

export async function OutageWait(input: OutageWaitInput): Promise<unknown> {
  const { call, limits } = input;
  const act = proxyActivities<Record<string, (...a: unknown[]) => Promise<unknown>>>(call.options)[call.activity]!;
  const perExecution = limits?.perExecution ?? DEFAULT_TRIES_PER_EXECUTION;
  let fault = input.fault;
  let waitS = input.waitS;
  for (let tries = 0; ; tries++) {
    if (tries >= perExecution) {
      log.info('outage still on; continuing as new so this wait does not grow one history', { activity: call.activity, fault, tries: (input.triesSoFar ?? 0) + tries });
      await continueAsNew<typeof OutageWait>({ ...input, fault, waitS, triesSoFar: (input.triesSoFar ?? 0) + tries });
    }
    await sleep(`${waitS} seconds`);
    try {
      const result = await act(...call.args);
      log.info('outage over; the call went through', { activity: call.activity, fault, tries: (input.triesSoFar ?? 0) + tries + 1 });
      return result;
    } catch (err) {
      const now = outageOf(err);
      if (!now) throw err;
      fault = now;
      waitS = Math.min(waitS * 2, capFor(fault, limits));
    }
  }
}

/**
 * Hands `call` to an OutageWait child and returns its result. A failure of the call
 * itself comes back as the ActivityFailure the caller would have seen calling it
 * directly (not wrapped in the child's failure), so callers' checks stay the same.
 */
export async function handOff<T>(call: OutageCall, fault: OutageType, waitS: number, limits: OutageWaitLimits | undefined, seq: number): Promise<T> {
  const info = workflowInfo();
  log.warn('a long outage: handing the call to an OutageWait workflow that continues as new', { activity: call.activity, fault });
  try {
    return (await executeChild(OutageWait, {
      args: [{ call, fault, waitS, limits }],
      // Unique per execution of the caller and per hand-off in it: replays name the same child.
      workflowId: `${info.workflowId}-outage-${info.runId.slice(0, 8)}-${seq}`,
      taskQueue: info.taskQueue,
    })) as T;
  } catch (err) {
    if (err instanceof ChildWorkflowFailure && err.cause instanceof ActivityFailure) throw err.cause;
    throw err;
  }
}
