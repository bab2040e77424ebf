/**
 * The main worker's activities (task queue `ratchet`): config, dataset, batch
 * building, weight sync, metrics, eval planning and scoring. Rollouts run on `ratchet-rollout`
 * (src/activities/rollout.ts) and the trainer in Python.
 */
import type { ArtifactStore } from '../artifacts/store';
import type { Logger } from '../shared/logger';
import type * as contract from '../workflows/activityTypes';
import { createBatchActivities } from './buildBatch';
import { createConfigActivities } from './config';
import { createDatasetActivities } from './dataset';
import { createEvalActivities } from './eval';
import { createMetricsActivities } from './metrics';
import type { createRolloutActivities } from './rollout';
import { createRolloutSummaryActivities } from './rolloutSummaries';
import { createWeightSyncActivities, type WeightSyncDeps } from './weightSync';

export interface ActivityDeps {
  store: ArtifactStore;
  logger: Logger;
  weightSync?: Omit<WeightSyncDeps, 'logger'>;
}

export function createActivities(deps: ActivityDeps) {
  return {
    ...createConfigActivities(deps),
    ...createDatasetActivities({ logger: deps.logger }),
    ...createBatchActivities({ store: deps.store, logger: deps.logger.child({ component: 'batch-builder' }) }),
    ...createWeightSyncActivities({ logger: deps.logger, store: deps.store, ...deps.weightSync }),
    ...createMetricsActivities(deps),
    ...createRolloutSummaryActivities(deps),
    ...createEvalActivities({ store: deps.store, logger: deps.logger.child({ component: 'eval' }) }),
  };
}

export type MainActivities = ReturnType<typeof createActivities>;

// Compile-time checks: the implementations accept what the workflow sends (src/workflows/activityTypes.ts).
type Accepts<Impl extends (input: never) => unknown, Sent> = Sent extends Parameters<Impl>[0] ? true : never;
export const contractChecks: [
  Accepts<ReturnType<typeof createBatchActivities>['buildBatch'], contract.BuildBatchInput>,
  Accepts<ReturnType<typeof createRolloutActivities>['rollout'], contract.RolloutInput>,
] = [true, true];
