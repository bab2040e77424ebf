/**
 * The rollout activity's input, as the rollout worker validates it: what
 * StepRollouts and EvalSweep send for one episode. Its result is a
 * RolloutSummary (./trajectory.ts): a reference to the saved
 * trajectory and a small summary, never the trajectory itself. One schema for
 * both sides: workflows build the input type (`RolloutInput`, before defaults), the
 * activity parses it and works on the output type (`ParsedRolloutInput`).
 */
import { z } from 'zod';
import { ArtifactsFields, RunConfig } from '../config/schema';
import { EVAL_STEP } from '../shared/steps';
import { Task } from '../tasks/schema';

/** A task by reference into its task file: keeps the workflow history small. */
export const TaskRef = z.object({ datasetPath: z.string().min(1), instanceId: z.string().min(1) }).strict();
export type TaskRef = z.infer<typeof TaskRef>;

/** What the rollout-group workflow sends: small, JSON-only. */
export const RolloutInput = z.object({
  runId: z.string().min(1),
  /** The training step, or EVAL_STEP for an EvalSweep episode. */
  step: z.number().int().min(EVAL_STEP),
  groupId: z.string().min(1),
  rolloutIndex: z.number().int().nonnegative(),
  envId: z.string().min(1),
  /** A reference into the task set (preferred: keeps history small), or the row itself. */
  task: z.union([TaskRef, Task]),
  taskSetDir: z.string().min(1),
  policyVersion: z.number().int().nonnegative(),
  /** `smollm2-135m` for version 0, `<run>/policy-v<N>` after. */
  modelName: z.string().min(1),
  sampling: RunConfig.shape.sampling.removeDefault(),
  envArgs: z.object({
    max_tokens: z.number().int().positive(),
    max_tool_calls: z.number().int().positive(),
    max_turns: z.number().int().positive(),
    few_shot: z.boolean().default(false),
  }).passthrough(),
  rubric: z.record(z.number()).default({}),
  sandbox: RunConfig.shape.sandbox.removeDefault(),
  inferenceBaseUrl: z.string().url(),
  /**
   * Every inference replica of the run (inference.base_urls), when there are several: the rollout
   * moves to another that serves its version when its own is down (src/agent/replicaPool.ts).
   */
  inferenceBaseUrls: z.array(z.string().url()).optional(),
  /**
   * trainer.mode = "full": the weights every replica must serve when a turn is sampled, the policy
   * version's checkpoint (its URI; absent at version 0: the base model). A replica serving other
   * weights (restarted: the base model) fails the rollout with InferenceUnavailable (src/agent/servedWeights.ts).
   */
  fullWeights: z.object({ checkpoint: z.string().min(1).optional() }).strict().optional(),
  seed: z.number().int().optional(),
  /** Heartbeat period and stall window (the run config's [liveness]); absent in older histories. */
  liveness: z.object({ heartbeat_every_s: z.number().positive(), stall_s: z.number().positive() }).strict().optional(),
  /** The run's [artifacts] store; absent: the worker's default store. */
  artifacts: ArtifactsFields.optional(),
});
/** What a caller may send (defaults not yet applied). */
export type RolloutInput = z.input<typeof RolloutInput>;
/** The input after validation, with its defaults. */
export type ParsedRolloutInput = z.output<typeof RolloutInput>;

/** The id of a rollout's task, whether it came by reference or as its row. */
export function taskIdOf(task: RolloutInput['task']): string {
  return 'instance_id' in task ? (task as Task).instance_id : (task as TaskRef).instanceId;
}
