/**
 * A wait for an operator-fixable fault (artifact store unreachable, disk full) handed
 * to the OutageWait child workflow (src/workflows/outageWait.ts): the fault types the
 * activities throw, the call as data, and how the wait is split. Pure: workflow code.
 */
import type { ActivityOptions } from '@temporalio/common';
import type { SyncWeightsInput } from './weightSync';

/** The fault types an operator fixes; the run waits for them rather than failing. */
export const OUTAGE_TYPES = ['StoreUnavailable', 'DiskFull'] as const;
export type OutageType = (typeof OUTAGE_TYPES)[number];

/** An activity call as data, so another workflow can make it. */
export interface OutageCall {
  activity: string;
  options: ActivityOptions;
  args: unknown[];
}

/** How long waits are split: tries in the caller before the hand-off, tries per child execution, the pause cap. */
export interface OutageWaitLimits {
  /** Failed tries the caller makes itself before handing the call to OutageWait (default 10: ~4 minutes at the 30 s cap). */
  handoffAfter?: number;
  /** Tries per OutageWait execution before it continues as new (default 100: ~1,100 events). */
  perExecution?: number;
  /** Cap of the pause between tries, in seconds (default 30 for the store, 120 for a full disk). */
  capS?: number;
}

/**
 * InferenceWait's input (src/workflows/inferenceWait.ts): StepRollouts' long wait for inference,
 * the weight sync that puts the step's version back, tried until it goes through.
 */
export interface InferenceWaitInput {
  /** The syncWeights request; with `hosts`, sent to each inference host's own queue (baseUrls empty). */
  req: SyncWeightsInput;
  /** inference.sync_task_queues, or empty (the main worker syncs). */
  hosts: string[];
  /** The pause before the next try, in seconds (carried across continue-as-new). */
  waitS: number;
  limits?: OutageWaitLimits;
  /** Tries across every execution so far. */
  triesSoFar?: number;
}

/** OutageWait's input. */
export interface OutageWaitInput {
  call: OutageCall;
  /** The fault that started the wait (for the log and the first pause's cap). */
  fault: OutageType;
  /** The pause before the next try, in seconds (carried across continue-as-new). */
  waitS: number;
  limits?: OutageWaitLimits;
  /** Tries across every execution so far. */
  triesSoFar?: number;
}
