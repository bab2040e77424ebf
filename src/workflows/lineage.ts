/**
 * A step's lineage, as far as the workflow knows it (docs/operations.md#lineage): what
 * code ran it, what it sampled from and with which settings, which policy versions
 * produced its rollouts, what the trainer consumed and produced. Pure: workflow code.
 * Recorded on the step record (`lineage`); `ratchet lineage <run> [step]` prints it.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { InitResolved, RunConfig } from '../config/schema';
import type { StepLineage, TaskFileDigest } from '../contracts/records';
import type { SampledTask } from '../contracts/step';

export interface LineageInput {
  build?: { deployment: string; build_id: string };
  config: RunConfig;
  configSha256: string;
  /** The run's sampling seed (orchestrator.seed, or the resumed run's). */
  seed: number;
  step: number;
  taskSetDir: string;
  /** The step's tasks inline (before v0.6-step-manifest), or their count with the step manifest that lists them. */
  tasks: SampledTask[] | number;
  stepManifest?: ArtifactRef;
  /** Trainer version before the step, and the step's rollout lag histogram (lag -> count). */
  versionBefore: number;
  stalenessHistogram?: Record<string, number>;
  batch?: { batch: ArtifactRef; manifest: ArtifactRef };
  /** The checkpoint the trainer started from, and what it wrote. */
  parentCheckpoint?: ArtifactRef;
  checkpoint?: ArtifactRef;
  adapter?: ArtifactRef;
  trained: boolean;
  learningRate?: number;
  /** Each env's task file as the sampling activity read it, and the trainer's code version (activity results, 0.7 on). */
  taskFiles?: TaskFileDigest[];
  trainerCode?: { version: string; sha256: string; torch?: string; threads?: number };
  /** Where the step's rollouts ran, from their summaries (rolloutStats: distinct and sorted; 0.7 on). */
  sandboxImageDigests?: string[];
  envModules?: { id: string; version: string; sha256: string }[];
  /** [model] init_from, resolved: the adapter the run started from. */
  initFrom?: InitResolved;
}

/**
 * Task rows named one by one up to this many: the record travels through history as recordStep's
 * input, so a step of thousands of tasks records the count only (its rollouts' trajectories name them).
 */
export const MAX_LINEAGE_ROWS = 256;

export function stepLineage(l: LineageInput): StepLineage {
  const c = l.config;
  const versions: Record<string, number> = {};
  for (const [lag, n] of Object.entries(l.stalenessHistogram ?? {})) versions[String(l.versionBefore - Number(lag))] = n;
  return {
    ...(l.build ? { build: l.build } : {}),
    config_sha256: l.configSha256,
    model: { path: c.model.path, served_model: c.inference.served_model },
    tasks: {
      task_set_dir: l.taskSetDir,
      seed: l.seed,
      row_count: typeof l.tasks === 'number' ? l.tasks : l.tasks.length,
      // With a step manifest the rows are in it (named by its sha256), not in history.
      rows: typeof l.tasks === 'number' ? [] : l.tasks.slice(0, MAX_LINEAGE_ROWS).map((t) => ({ env: t.envId, dataset: t.datasetPath, instance_id: t.instanceId })),
      ...(l.stepManifest ? { step_manifest: l.stepManifest } : {}),
      ...(l.taskFiles?.length ? { files: l.taskFiles } : {}),
    },
    envs: c.env.map((e) => ({ ...e }) as Record<string, unknown>),
    sampling: { ...c.sampling } as Record<string, unknown>,
    sandbox_image: c.sandbox.image,
    ...(l.sandboxImageDigests?.length ? { sandbox_image_digests: l.sandboxImageDigests } : {}),
    ...(l.envModules?.length ? { env_modules: l.envModules } : {}),
    rollout_policy_versions: versions,
    ...(l.batch ? { batch_sha256: l.batch.batch.sha256, manifest_sha256: l.batch.manifest.sha256 } : {}),
    trainer: {
      seed: c.trainer.seed,
      step: l.step,
      learning_rate: l.learningRate ?? c.trainer.optim.lr,
      loss: c.trainer.loss.kind,
      ...(l.parentCheckpoint ? { parent_checkpoint_sha256: l.parentCheckpoint.sha256 } : {}),
      ...(l.trained && l.checkpoint ? { checkpoint_sha256: l.checkpoint.sha256 } : {}),
      ...(l.trained && l.adapter ? { adapter_sha256: l.adapter.sha256 } : {}),
      ...(l.trained && l.trainerCode ? { code: l.trainerCode } : {}),
      ...(l.initFrom ? { init_from: {
        from: l.initFrom.from, run_id: l.initFrom.run_id, step: l.initFrom.step,
        checkpoint_sha256: l.initFrom.checkpoint.sha256, adapter_sha256: l.initFrom.adapter.sha256,
      } } : {}),
    },
  };
}
