/**
 * The messages a TrainRun answers, defined once so the client and the CLI import
 * the same definitions (STYLE: defineUpdate/defineQuery at module scope).
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { ControlRequest, Progress, RunStatus, SettingsChange } from '../contracts/run';
import type { RolloutProgressSignal } from '../contracts/step';
import type { ShardStatusSignal } from '../contracts/chunks';

export const pauseUpdate = defineUpdate<RunStatus>('pause');
export const resumeUpdate = defineUpdate<RunStatus>('resume');
export const stopAfterCurrentStepUpdate = defineUpdate<RunStatus>('stopAfterCurrentStep');
/**
 * The same three updates with their ControlRequest (reason, identity), recorded with the action: the
 * workflow's handlers and `ratchet` use these; a client that sends no argument (the definitions above,
 * older clients) is recorded as identity "unknown", no reason.
 */
export const controlUpdates = {
  pause: defineUpdate<RunStatus, [ControlRequest]>('pause'),
  resume: defineUpdate<RunStatus, [ControlRequest]>('resume'),
  stop: defineUpdate<RunStatus, [ControlRequest]>('stopAfterCurrentStep'),
} as const;
/** Change the learning rate, the staleness bound (async_level) and/or the eval cadence (eval_every_steps) from the next step boundary on. */
export const setSettingsUpdate = defineUpdate<RunStatus, [SettingsChange]>('setSettings');
export const progressQuery = defineQuery<Progress>('progress');

/** Sent by a step's rollout child to its parent, by workflow id, as groups finish. */
export const rolloutProgressSignal = defineSignal<[RolloutProgressSignal]>('rolloutProgress');

/** Registered by infra/temporal.sh; the Web UI filters runs on these. */
export const SA = {
  step: defineSearchAttributeKey('RatchetStep', SearchAttributeType.INT),
  meanReward: defineSearchAttributeKey('RatchetMeanReward', SearchAttributeType.DOUBLE),
  policyVersion: defineSearchAttributeKey('RatchetPolicyVersion', SearchAttributeType.INT),
  status: defineSearchAttributeKey('RatchetStatus', SearchAttributeType.KEYWORD),
} as const;

/** Sent by a RolloutShard to its StepRollouts, by workflow id: its done count and waits (rolloutShard.ts). */
export const shardStatusSignal = defineSignal<[ShardStatusSignal]>('shardStatus');
