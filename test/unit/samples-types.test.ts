/** Compile-time check: the activity fits the contract TrainRun calls (src/workflows/activityTypes.ts). */
import type { BatchActivities } from '../../src/contracts';
import { createBatchActivities } from '../../src/activities/buildBatch';
import { LocalArtifactStore } from '../../src/artifacts/store';

test('createBatchActivities implements the workflow\'s BatchActivities', () => {
  const acts: BatchActivities = createBatchActivities({ store: new LocalArtifactStore('/nonexistent') });
  expect(typeof acts.buildBatch).toBe('function');
});
