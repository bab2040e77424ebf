/**
 * Weight sync that waits out a down inference server instead of failing the
 * run: the run shows `waiting-for-inference` until every replica serves the
 * version. An outage that outlasts `maxWaits` attempts hands back
 * CONTINUE_AS_NEW, so the caller can carry on in a fresh history (an outage of
 * days would otherwise add a timer and an activity per minute). Workflow code.
 */
import { ActivityFailure, ApplicationFailure, log, patched, sleep } from '@temporalio/workflow';
import type { SyncWeightsInput } from '../activities/weightSync';
import { PATCHES } from './patches';
import { sync } from './proxies';
import type { RunControl } from './runControl';

export const CONTINUE_AS_NEW = 'continue-as-new' as const;

/** Failed attempts one execution waits through by default: about an hour at the 60 s cap. */
export const DEFAULT_INFERENCE_WAITS_PER_EXECUTION = 60;

export const isInferenceUnavailable = (err: unknown): err is ActivityFailure & { cause: ApplicationFailure } =>
  err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable';

export async function syncUntilServed(
  run: RunControl,
  input: () => SyncWeightsInput,
  maxWaits = DEFAULT_INFERENCE_WAITS_PER_EXECUTION,
): Promise<{ ms: number } | typeof CONTINUE_AS_NEW> {
  for (let wait = 5, attempts = 1; ; wait = Math.min(wait * 2, 60), attempts++) {
    try {
      const r = await sync.syncWeights(input());
      run.setWaitingForInference(false);
      return r;
    } catch (err) {
      if (!isInferenceUnavailable(err)) throw err;
      if (run.setWaitingForInference(true)) log.warn('inference is down; the run waits for it', { error: err.cause.message });
      if (attempts >= maxWaits && patched(PATCHES.inferenceWaitContinueAsNew)) {
        log.warn('inference still down; continuing as new so the wait does not grow this history', { attempts });
        return CONTINUE_AS_NEW;
      }
      await sleep(`${wait} seconds`);
    }
  }
}
