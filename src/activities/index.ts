/**
 * The main worker's activities (task queue `ratchet`): config, dataset, batch
 * building, weight sync, metrics, eval planning and scoring. Rollouts run on `ratchet-rollout`
 * (src/activities/rollout.ts) and the trainer in Python.
 */
import type { ArtifactStore } from '../artifacts/store';
import type { Logger } from '../shared/logger';
import type { MainActivities, RolloutActivities } from '../contracts';
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

/** The main worker's activities, checked against the contract workflows proxy (src/contracts/activities.ts). */
export function createActivities(deps: ActivityDeps) {
  return {
    ...createConfigActivities(deps),
    ...createDatasetActivities({ logger: deps.logger }),
    ...createBatchActivities({ store: deps.store, logger: deps.logger.child({ component: 'batch-builder' }) }),
    ...createWeightSyncActivities({ logger: deps.logger, store: deps.store, ...deps.weightSync }),
    ...createMetricsActivities(deps),
    ...createRolloutSummaryActivities(deps),
    ...createEvalActivities({ store: deps.store, logger: deps.logger.child({ component: 'eval' }) }),
  } satisfies MainActivities;
}

// Compile-time check: the rollout worker's activity (its own worker, src/activities/rollout.ts) answers what
// the workflows expect (src/contracts/activities.ts). Both sides take the one RolloutInput schema's types.
type Rollout = ReturnType<typeof createRolloutActivities>['rollout'];
type Answers<Impl extends (input: never) => unknown, Expected> = Awaited<ReturnType<Impl>> extends Expected ? true : never;
export const contractChecks: [
  Answers<Rollout, Awaited<ReturnType<RolloutActivities['rollout']>>>,
] = [true];
