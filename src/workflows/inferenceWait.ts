/**
 * Weight sync that waits out a down inference server instead of failing the
 * run: the run shows `waiting-for-inference` until every replica serves the
 * version. Workflow code.
 */
import { ActivityFailure, ApplicationFailure, log, sleep } from '@temporalio/workflow';
import type { SyncWeightsInput } from '../activities/weightSync';
import { sync } from './proxies';
import type { RunControl } from './runControl';

export const isInferenceUnavailable = (err: unknown): err is ActivityFailure & { cause: ApplicationFailure } =>
  err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable';

export async function syncUntilServed(run: RunControl, input: () => SyncWeightsInput): Promise<{ ms: number }> {
  for (let wait = 5; ; wait = Math.min(wait * 2, 60)) {
    try {
      const r = await sync.syncWeights(input());
      run.setWaitingForInference(false);
      return r;
    } catch (err) {
      if (!isInferenceUnavailable(err)) throw err;
      if (run.setWaitingForInference(true)) log.warn('inference is down; the run waits for it', { error: err.cause.message });
      await sleep(`${wait} seconds`);
    }
  }
}
