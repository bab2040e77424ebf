/**
 * The messages a TrainRun answers, defined once so the client and the CLI import
 * the same definitions (STYLE: defineUpdate/defineQuery at module scope).
 */
import { defineQuery, defineSignal, defineUpdate } from '@temporalio/workflow';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import type { Progress, RunStatus } from '../contracts/run';
import type { RolloutProgressSignal } from '../contracts/step';
import type { ShardStatusSignal } from '../contracts/chunks';

export const pauseUpdate = defineUpdate<RunStatus>('pause');
export const resumeUpdate = defineUpdate<RunStatus>('resume');
export const stopAfterCurrentStepUpdate = defineUpdate<RunStatus>('stopAfterCurrentStep');
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

/** Sent by a RolloutShard to its StepRollouts, by workflow id: its done count and waits (stepChunks.ts). */
export const shardStatusSignal = defineSignal<[ShardStatusSignal]>('shardStatus');
