/** `ratchet release`: which trainer queue a run's history says it called last. */
import { lastTrainerQueue } from '../../../src/cli/release';

const scheduled = (activity: string, queue: string) => ({ activityTaskScheduledEventAttributes: { activityType: { name: activity }, taskQueue: { name: queue } } });

describe('lastTrainerQueue', () => {
  test('the newest trainer activity on a trainer\'s own queue, never the shared announce queue or other activities', () => {
    expect(lastTrainerQueue([
      scheduled('trainer.announce', 'ratchet-trainer'),
      scheduled('trainer.load', 'ratchet-trainer-hostA-1'),
      scheduled('trainer.announce', 'ratchet-trainer'),
      scheduled('trainer.step', 'ratchet-trainer-hostB-2'),
      scheduled('syncWeights', 'ratchet'),
      scheduled('trainer.announce', 'ratchet-trainer'),
      { workflowExecutionTerminatedEventAttributes: {} },
    ])).toBe('ratchet-trainer-hostB-2');
  });

  test('none when the execution only announced (or never called a trainer)', () => {
    expect(lastTrainerQueue([scheduled('trainer.announce', 'ratchet-trainer'), scheduled('rollout', 'ratchet-rollout')])).toBeUndefined();
    expect(lastTrainerQueue([])).toBeUndefined();
  });
});
