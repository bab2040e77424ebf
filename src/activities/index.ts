/**
 * The main worker's activities (task queue `ratchet`): config, dataset, batch
 * building, weight sync, metrics, eval planning and scoring. Rollouts run on `ratchet-rollout`
 * (src/activities/rollout.ts, checked against RolloutActivities there) and the trainer in Python.
 */
import type { ArtifactStore } from '../artifacts/store';
import type { Logger } from '../shared/logger';
import type { MainActivities } from '../contracts';
import { createBatchActivities } from './buildBatch';
import { createCheckpointFallbackActivities } from './checkpointFallback';
import { createConfigActivities } from './config';
import { createDatasetActivities } from './dataset';
import { createEvalActivities } from './eval';
import { createMetricsActivities } from './metrics';
import { createRolloutSummaryActivities } from './rolloutSummaries';
import { createRolloutWorkersActivities } from './rolloutWorkers';
import { createSftActivities } from './sft';
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
    ...createDatasetActivities({ logger: deps.logger, store: deps.store }),
    ...createBatchActivities({ store: deps.store, logger: deps.logger.child({ component: 'batch-builder' }) }),
    ...createWeightSyncActivities({ logger: deps.logger, store: deps.store, ...deps.weightSync }),
    ...createMetricsActivities(deps),
    ...createRolloutSummaryActivities(deps),
    ...createEvalActivities({ store: deps.store, logger: deps.logger.child({ component: 'eval' }) }),
    ...createRolloutWorkersActivities({ store: deps.store }),
    ...createSftActivities({ store: deps.store, logger: deps.logger.child({ component: 'sft' }) }),
    ...createCheckpointFallbackActivities(deps),
  } satisfies MainActivities;
}
