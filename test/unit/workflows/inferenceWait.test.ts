/**
 * What StepRollouts' inference wait counts as inference down (src/workflows/inferenceWait.ts): with
 * per-host sync queues, an inference host whose worker never picks the sync up (schedule-to-start
 * timeout) is a down host to wait for, not a failed run (issue 25, hole 3).
 */
import { ActivityFailure, ApplicationFailure, RetryState, TimeoutFailure, TimeoutType } from '@temporalio/common';
import { inferenceDown } from '../../../src/workflows/inferenceWait';

const activityFailure = (cause: Error) => new ActivityFailure('activity failed', 'syncWeights', '1', RetryState.NON_RETRYABLE_FAILURE, 'main', cause);

test('InferenceUnavailable is inference down, with or without per-host queues', () => {
  const err = activityFailure(ApplicationFailure.nonRetryable('replica down', 'InferenceUnavailable'));
  expect(inferenceDown(err, [])).toBe(true);
  expect(inferenceDown(err, ['inference-host-a'])).toBe(true);
});

test('a schedule-to-start timeout on an inference host\'s queue is inference down; on the main worker it is not', () => {
  const err = activityFailure(new TimeoutFailure('activity ScheduleToStart timeout', undefined, TimeoutType.SCHEDULE_TO_START));
  expect(inferenceDown(err, ['inference-host-a'])).toBe(true);
  expect(inferenceDown(err, [])).toBe(false);
});

test('any other failure is not a wait: it fails as before', () => {
  expect(inferenceDown(activityFailure(ApplicationFailure.nonRetryable('bad adapter', 'CorruptArtifact')), ['q'])).toBe(false);
  expect(inferenceDown(new Error('not an activity failure'), ['q'])).toBe(false);
});
