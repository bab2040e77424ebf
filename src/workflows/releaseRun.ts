/**
 * `ratchet release <run>`: what a run that ended without saying so (terminated) still holds, given back
 * by hand: its trainer's lease and model (trainer.release on the trainer's own queue) and its adapters in
 * inference (unloadRunAdapters). The input carries who asked and why, so this workflow's history records
 * the action like a control update (docs/operations.md). Workflow code.
 */
import type { ReleaseRunInput, ReleaseRunResult } from '../contracts/run';
import { light, releaseOn } from './proxies';

export async function ReleaseRun(input: ReleaseRunInput): Promise<ReleaseRunResult> {
  let trainer: ReleaseRunResult['trainer'] = { state: 'none-recorded' };
  if (input.trainerQueue) {
    const onQueue = releaseOn(input.trainerQueue);
    try {
      const r = await onQueue['trainer.release']({ run_id: input.runId });
      trainer = { state: r.released ? 'released' : 'not-held', queue: input.trainerQueue, worker_id: r.worker_id };
    } catch (err) {
      trainer = { state: 'gone', queue: input.trainerQueue, error: String(err) };
    }
  }
  const adapters = await light.unloadRunAdapters({ runId: input.runId, baseUrls: input.baseUrls });
  return { runId: input.runId, trainer, adapters };
}
