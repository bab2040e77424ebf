/**
 * The step manifest (issue 24): a step's tasks and every setting its rollouts share,
 * written once per step to the artifact store (runKeys.stepManifest) by the
 * `writeStepManifest` activity. A chunk of rollouts carries only its reference and a
 * range; the rollout worker reads the manifest once (cached by sha256) and builds each
 * rollout's RolloutInput from it, exactly as StepRollouts built it inline before.
 */
import { z } from 'zod';
import { ArtifactsFields, RunConfig } from '../config/schema';
import { RolloutInput } from './rollout';
import type { SampledTask } from './step';
import { rolloutSeed } from './chunks';

export const ManifestTask = z.object({
  envId: z.string().min(1),
  groupId: z.string().min(1),
  datasetPath: z.string().min(1),
  instanceId: z.string().min(1),
  envIndex: z.number().int().nonnegative(),
}).strict();

export const StepManifest = z.object({
  version: z.literal(1),
  runId: z.string().min(1),
  step: z.number().int().nonnegative(),
  policyVersion: z.number().int().nonnegative(),
  modelName: z.string().min(1),
  taskSetDir: z.string().min(1),
  seed: z.number().int(),
  rolloutsPerExample: z.number().int().positive(),
  tasks: z.array(ManifestTask),
  sampling: RunConfig.shape.sampling.removeDefault(),
  /** Per [[env]] section (by envIndex): its args and rubric. */
  envs: z.array(z.object({ args: RolloutInput.shape.envArgs, rubric: z.record(z.number()).default({}) })),
  sandbox: RunConfig.shape.sandbox.removeDefault(),
  inferenceBaseUrls: z.array(z.string().url()).min(1),
  liveness: z.object({ heartbeat_every_s: z.number().positive(), stall_s: z.number().positive() }).strict(),
  artifacts: ArtifactsFields.optional(),
  /**
   * orchestrator.max_concurrent_rollouts: a chunk runs at most this many of its rollouts at once. The step keeps
   * at least one chunk in flight, so without it a setting below the chunk size was exceeded (4 set, 8 ran).
   * Absent from older manifests: the chunk's size.
   */
  maxConcurrentRollouts: z.number().int().positive().optional(),
  /** trainer.mode = "full": the weights the step's rollouts expect the replicas to serve (RolloutInput.fullWeights). */
  fullWeights: RolloutInput.shape.fullWeights,
});
export type StepManifest = z.output<typeof StepManifest>;
export type StepManifestInput = z.input<typeof StepManifest>;


export function manifestTotal(m: Pick<StepManifest, 'tasks' | 'rolloutsPerExample'>): number {
  return m.tasks.length * m.rolloutsPerExample;
}

/** Rollout i of the step (i = group x rollouts_per_example + k), as StepRollouts' inputFor built it. */
export function rolloutInputOf(m: StepManifest, i: number): RolloutInput {
  const g = Math.floor(i / m.rolloutsPerExample);
  const k = i % m.rolloutsPerExample;
  const task: SampledTask = m.tasks[g]!;
  const env = m.envs[task.envIndex]!;
  return {
    runId: m.runId,
    step: m.step,
    groupId: task.groupId,
    rolloutIndex: k,
    envId: task.envId,
    task: { datasetPath: task.datasetPath, instanceId: task.instanceId },
    taskSetDir: m.taskSetDir,
    policyVersion: m.policyVersion,
    modelName: m.modelName,
    sampling: m.sampling,
    envArgs: env.args,
    rubric: env.rubric,
    sandbox: m.sandbox,
    // Spread rollouts over the replicas; a group's rollouts share none on purpose (no cache skew).
    inferenceBaseUrl: m.inferenceBaseUrls[i % m.inferenceBaseUrls.length]!,
    // Every replica, so the rollout worker can move an episode off a dead one (src/agent/replicaPool.ts).
    ...(m.inferenceBaseUrls.length > 1 ? { inferenceBaseUrls: [...m.inferenceBaseUrls] } : {}),
    seed: rolloutSeed(m.seed, m.step, g, k),
    liveness: m.liveness,
    ...(m.artifacts ? { artifacts: m.artifacts } : {}),
    ...(m.fullWeights ? { fullWeights: m.fullWeights } : {}),
  };
}
