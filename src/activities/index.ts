/**
 * The main worker's activities (task queue `ratchet`): config, dataset, batch
 * building, weight sync, metrics. Rollouts run on `ratchet-rollout`
 * (src/activities/rollout.ts) and the trainer in Python.
 */
import type { ArtifactStore } from '../artifacts/store';
import type { Logger } from '../shared/logger';
import { createConfigActivities } from './config';
import { createDatasetActivities } from './dataset';
import { createMetricsActivities } from './metrics';
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
    ...createWeightSyncActivities({ logger: deps.logger, ...deps.weightSync }),
    ...createMetricsActivities(deps),
  };
}

export type MainActivities = ReturnType<typeof createActivities>;
