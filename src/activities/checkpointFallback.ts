import { ApplicationFailure } from '@temporalio/common';
import { type ArtifactStore } from '../artifacts/store';
import { storeFor, withStoreErrors } from '../artifacts/stores';
import type { CheckpointFallbackActivities, CheckpointFallbackInput, CheckpointFallbackResult } from '../contracts';
import { checkpointProblem, commitFallback, planFallback } from '../records/fallback';
import type { Logger } from '../shared/logger';

export interface CheckpointFallbackDeps {
  store: ArtifactStore;
  logger: Logger;
}

export function createCheckpointFallbackActivities({ store, logger }: CheckpointFallbackDeps) {
  return {
    /**
     * The trainer could not load the run's newest checkpoint. If that checkpoint verifies here, the
     * failure was not corruption (a checkpoint of another model, say): `fellBack` false, the run fails
     * as before. Else the run falls back to the newest checkpoint that verifies (src/records/fallback.ts),
     * recorded before this returns. Idempotent: a retry finds the fallback's objects (content-keyed, the
     * same bytes: the time comes from the workflow).
     */
    async fallBackToVerifiedCheckpoint(input: CheckpointFallbackInput): Promise<CheckpointFallbackResult> {
      return withStoreErrors(async () => {
        const runStore = storeFor(input.state.artifacts, store);
        const problem = await checkpointProblem(runStore, input.state);
        if (problem === undefined) {
          logger.warn({ runId: input.state.runId, checkpoint: input.state.checkpoint?.uri, error: input.error },
            'the trainer refused a checkpoint that verifies: not corruption, no fallback');
          return { fellBack: false };
        }
        const plan = await planFallback(runStore, input.state, `${input.error} (verified here: ${problem})`, 'trainer-load', input.time);
        if (plan.record.epoch !== (input.state.epoch ?? 0) + 1) throw ApplicationFailure.nonRetryable('fallback epoch out of order', 'CheckpointFallback');
        await commitFallback(runStore, plan);
        logger.warn({ runId: input.state.runId, bad: plan.record.bad.checkpoint?.uri, used: plan.record.used?.checkpoint.uri ?? 'the base model',
          retrained: plan.record.retrained_steps, epoch: plan.record.epoch }, 'newest checkpoint is corrupt: the run falls back to the newest that verifies');
        return { fellBack: true, record: plan.record, state: plan.state };
      });
    },
  } satisfies CheckpointFallbackActivities;
}
