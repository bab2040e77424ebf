/**
 * `ratchet train --wait` / `ratchet status`: every phase of the current step,
 * with the trainer's micro-batch progress read from the heartbeat details of
 * its pending activity (Temporal's describe).
 */
import type { WorkflowExecutionDescription } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { phaseLine, summaryLineOnce, trainerBeat } from '../../../src/cli/follow';
import type { Progress } from '../../../src/contracts';

const progress = (over: Partial<Progress>): Progress => ({
  runId: 'r', step: 3, maxSteps: 10, phase: 'training', status: 'running', rolloutsDone: 8, rolloutsTotal: 8, policyVersion: 3, ...over,
});

function describeWith(pending: unknown[]): WorkflowExecutionDescription {
  return { raw: { pendingActivities: pending } } as unknown as WorkflowExecutionDescription;
}

test('the trainer heartbeat (micro-batch k of n, attempt, age) comes from the pending activity', () => {
  const desc = describeWith([
    { activityType: { name: 'rollout' }, attempt: 1 },
    {
      activityType: { name: 'trainer.step' }, attempt: 2,
      heartbeatDetails: { payloads: [defaultPayloadConverter.toPayload({ step: 3, micro_batch: 2, micro_batches: 5 })] },
      lastHeartbeatTime: { seconds: 1_000, nanos: 0 },
    },
  ]);
  expect(trainerBeat(desc, 1_007_000)).toEqual({ activity: 'trainer.step', microBatch: 2, microBatches: 5, attempt: 2, sinceBeatS: 7 });
  expect(phaseLine(progress({}), trainerBeat(desc))).toBe('step 3/10 · training micro-batch 2/5 (attempt 2)');
  expect(trainerBeat(describeWith([{ activityType: { name: 'rollout' } }]))).toBeUndefined();
  // Before the first heartbeat: the phase alone.
  expect(phaseLine(progress({}), trainerBeat(describeWith([{ activityType: { name: 'trainer.step' }, attempt: 1 }])))).toBe('step 3/10 · training');
});

test.each([
  ['sampling', {}, 'step 3/10 · sampling tasks'],
  ['rollouts', { rolloutsDone: 5, rolloutsTotal: 8 }, 'step 3/10 · rollouts 5/8'],
  ['building-batch', {}, 'step 3/10 · building the batch'],
  ['saving', {}, 'step 3/10 · saving the checkpoint'],
  ['weight-sync', {}, 'step 3/10 · loading the new adapter into inference (weight sync)'],
  ['metrics', { prefetchedStep: 4 }, "step 3/10 · recording the step · step 4's rollouts running ahead"],
  ['rollouts', { status: 'waiting-for-inference', rolloutsDone: 0 }, 'step 3/10 · rollouts 0/8 · waiting-for-inference'],
  ['rollouts', { status: 'waiting-for-rollout-workers', rolloutsDone: 5 },
    'step 3/10 · rollouts 5/8 · waiting-for-rollout-workers (no rollout worker runs or polls ratchet-rollout: start one, e.g. `ratchet up`; the rollouts wait queued)'],
] as const)('phase %s reads as a line', (phase, over, line) => {
  expect(phaseLine(progress({ phase, ...over } as Partial<Progress>))).toBe(line);
});

test("with no step record readable here, the workflow's summary of a finished step prints once, not at every poll", () => {
  const shown = new Set<number>();
  const last = { step: 7, policyVersion: 8, meanReward: -0.5, rollouts: 2 } as NonNullable<Progress['lastStep']>;
  expect(summaryLineOnce(last, false, shown)).toMatch(/step +7 +v8 reward .*2 rollouts/);
  expect(summaryLineOnce(last, false, shown)).toBeUndefined();
  expect(summaryLineOnce({ ...last, step: 8, policyVersion: 9 }, false, shown)).toMatch(/step +8 +v9/);
  // Records read from the store print their own fuller lines.
  expect(summaryLineOnce({ ...last, step: 9 }, true, shown)).toBeUndefined();
  expect(summaryLineOnce(undefined, false, shown)).toBeUndefined();
});
