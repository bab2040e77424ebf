import { createHash } from 'node:crypto';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import type { Logger } from '../shared/logger';
import { paths } from '../shared/paths';
import { loadTasks } from '../tasks/load';
import type { DatasetActivities, SampledTasks, SampledTask, SampleTasksInput, WriteStepManifestInput } from '../contracts';
import type { TaskFileDigest } from '../contracts/records';
import { fileDigest } from '../tasks/fileDigest';
import { runKeys } from '../artifacts/keys';
import type { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, storeForRef, withStoreErrors } from '../artifacts/stores';
import { poolWeight, type TaskPool } from '../samples/taskPool';
import { StepManifest, type StepManifestInput } from '../contracts/manifest';

export interface DatasetDeps {
  logger: Logger;
  /** Where step manifests are written (the run's [artifacts] store, else this one). */
  store?: ArtifactStore;
  /** Reads a task file's instance ids; defaults to src/tasks' loader. */
  listInstanceIds?: (file: string) => Promise<string[]>;
}

/** A deterministic stream of uint32s from a string key (sha256 counter mode): no Math.random. */
export function seededInts(key: string): () => number {
  let counter = 0;
  let buf = Buffer.alloc(0);
  let pos = 0;
  return () => {
    if (pos + 4 > buf.length) {
      buf = createHash('sha256').update(`${key}:${counter++}`).digest();
      pos = 0;
    }
    const v = buf.readUInt32BE(pos);
    pos += 4;
    return v;
  };
}

export function seededPermutation(n: number, key: string): number[] {
  const next = seededInts(key);
  const a = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = next() % (i + 1);
    [a[i], a[j]] = [a[j]!, a[i]!];
  }
  return a;
}

/**
 * Which tasks a step trains on. Each env's tasks are walked in epochs: a seeded
 * permutation per epoch, global position step*batch_size + slot, so every task
 * is seen once per epoch and the same (seed, step) always gives the same batch.
 * With a pass-rate pool, tasks are drawn by their pool weight instead (src/samples/taskPool.ts),
 * without repeats within the step while untaken tasks remain; as deterministic.
 */
export function sampleForStep(input: SampleTasksInput, idsByEnv: string[][], datasetPaths: string[], pool?: { pool: TaskPool; floor: number }): SampledTask[] {
  const weights = input.envs.map((e) => e.weight);
  const total = weights.reduce((a, b) => a + b, 0);
  const round = input.round ?? 0;
  const pickEnv = seededInts(round ? `env:${input.seed}:${input.step}:r${round}` : `env:${input.seed}:${input.step}`);
  const out: SampledTask[] = [];
  // One permutation per (env, epoch), not per slot: a batch of B tasks from N ids cost B permutations of N
  // (a 512-task step over 65,536 ids took 13 s of the step's wall time; issue 24).
  const perms = new Map<string, number[]>();
  const poolWeights = pool ? idsByEnv.map((ids) => ids.map((id) => poolWeight(pool.pool.tasks[id], pool.floor))) : undefined;
  const taken = idsByEnv.map(() => new Set<number>());
  const pickTask = seededInts(`pool:${input.seed}:${input.step}:${round}`);
  for (let slot = 0; slot < input.batchSize; slot++) {
    let envIndex = 0;
    if (input.envs.length > 1) {
      let r = (pickEnv() / 2 ** 32) * total;
      while (envIndex < weights.length - 1 && r >= weights[envIndex]!) r -= weights[envIndex++]!;
    }
    const ids = idsByEnv[envIndex]!;
    // A refill round draws from a permutation of its own (not the epoch walk, which the step's first round keeps).
    const pos = round ? slot : input.step * input.batchSize + slot;
    const epoch = Math.floor(pos / ids.length);
    const permKey = round ? `refill:${input.seed}:${input.envs[envIndex]!.id}:${input.step}:${round}:${epoch}` : `tasks:${input.seed}:${input.envs[envIndex]!.id}:${epoch}`;
    let perm = perms.get(`${envIndex}/${permKey}`);
    if (!perm) perms.set(`${envIndex}/${permKey}`, (perm = seededPermutation(ids.length, permKey)));
    const instanceId = poolWeights ? ids[weightedPick(poolWeights[envIndex]!, taken[envIndex]!, pickTask)]! : ids[perm[pos % ids.length]!]!;
    out.push({
      envId: input.envs[envIndex]!.id,
      envIndex,
      datasetPath: datasetPaths[envIndex]!,
      instanceId,
      groupId: `s${input.step}${input.epoch ? `-e${input.epoch}` : ''}${round ? `-r${round}` : ''}-g${slot}-${instanceId}`,
    });
  }
  return out;
}

/** Index drawn with probability proportional to its weight among those not taken (all again once every one is). */
function weightedPick(w: number[], taken: Set<number>, next: () => number): number {
  if (taken.size >= w.length) taken.clear();
  let total = 0;
  for (let k = 0; k < w.length; k++) if (!taken.has(k)) total += w[k]!;
  let r = (next() / 2 ** 32) * total;
  let last = -1;
  for (let k = 0; k < w.length; k++) {
    if (taken.has(k)) continue;
    last = k;
    r -= w[k]!;
    if (r < 0) break;
  }
  taken.add(last);
  return last;
}

/** Instance ids of a task file through the shared loader (JSONL or Parquet); bad rows are skipped with a warning. */
async function taskFileInstanceIds(file: string): Promise<string[]> {
  try {
    return (await loadTasks(file, { onInvalid: 'skip' })).tasks.map((t) => t.instance_id);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw err;
    throw ApplicationFailure.nonRetryable(`task set ${file}: ${(err as Error).message}`, 'TaskSetError');
  }
}

export function createDatasetActivities({ logger, store, listInstanceIds = taskFileInstanceIds }: DatasetDeps) {
  const activities = {
    /** An empty taskSetDir means the worker's default (RATCHET_TASKS or .ratchet/tasks); the answer names the one used. */
    async sampleTasks(input: SampleTasksInput): Promise<SampledTasks> {
      if (!input.taskSetDir) input = { ...input, taskSetDir: paths.tasks() };
      const datasetPaths = input.envs.map((e) => (path.isAbsolute(e.dataset) ? e.dataset : path.join(input.taskSetDir, e.dataset)));
      const idsByEnv: string[][] = [];
      for (const [i, file] of datasetPaths.entries()) {
        let ids: string[];
        try {
          ids = await listInstanceIds(file);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
            throw ApplicationFailure.nonRetryable(
              `task set ${file} (env "${input.envs[i]!.id}", key env.dataset) does not exist. ` +
              'Fix: generate the task set (npm run setup builds .ratchet/tasks) or point env.dataset at a JSONL file.', 'TaskSetError');
          }
          throw err;
        }
        if (ids.length === 0) {
          throw ApplicationFailure.nonRetryable(`task set ${file} (env "${input.envs[i]!.id}") has no tasks. Fix: regenerate it.`, 'TaskSetError');
        }
        idsByEnv.push(ids);
      }
      let pool: { pool: TaskPool; floor: number } | undefined;
      if (input.taskPool) {
        if (!store) throw ApplicationFailure.nonRetryable('sampleTasks with a task pool needs an artifact store (createDatasetActivities({ store }))', 'ConfigError');
        const ref = input.taskPool;
        pool = { pool: await withStoreErrors(() => storeForRef(ref, input.artifacts, store).getJson(ref)) as TaskPool, floor: input.poolFloor ?? 0.05 };
      }
      const tasks = sampleForStep(input, idsByEnv, datasetPaths, pool);
      logger.info({ runId: input.runId, step: input.step, tasks: tasks.map((t) => t.instanceId) }, 'sampled tasks');
      // The files as read now, for the step's lineage (the same path may be rewritten between steps).
      const files: TaskFileDigest[] = [];
      for (const [i, file] of datasetPaths.entries()) {
        const d = await fileDigest(file);
        if (d) files.push({ env: input.envs[i]!.id, path: file, ...d });
      }
      return { taskSetDir: input.taskSetDir, tasks, files };
    },

    /**
     * The step manifest (src/contracts/manifest.ts): the sampled tasks and every setting the step's
     * rollouts share, written once under a content key; the workflow carries only its ref.
     */
    async writeStepManifest(input: WriteStepManifestInput): Promise<{ taskSetDir: string; manifest: ArtifactRef; tasks: number; files?: TaskFileDigest[] }> {
      if (!store) throw ApplicationFailure.nonRetryable('writeStepManifest needs an artifact store (createDatasetActivities({ store }))', 'ConfigError');
      const sampled = await activities.sampleTasks({
        runId: input.runId, step: input.step, seed: input.seed, batchSize: input.batchSize, taskSetDir: input.taskSetDir,
        envs: input.envs.map(({ id, dataset, weight }) => ({ id, dataset, weight })), ...(input.round ? { round: input.round } : {}),
        ...(input.epoch ? { epoch: input.epoch } : {}),
        ...(input.taskPool ? { taskPool: input.taskPool, poolFloor: input.poolFloor, artifacts: input.artifacts } : {}),
      });
      const manifest: StepManifest = StepManifest.parse({
        version: 1, runId: input.runId, step: input.step, policyVersion: input.policyVersion, modelName: input.modelName,
        taskSetDir: sampled.taskSetDir, seed: input.seed, rolloutsPerExample: input.rolloutsPerExample, tasks: sampled.tasks,
        sampling: input.sampling, envs: input.envs.map((e) => ({ args: e.args, rubric: e.rubric })), sandbox: input.sandbox,
        inferenceBaseUrls: input.inferenceBaseUrls, liveness: input.liveness, ...(input.artifacts ? { artifacts: input.artifacts } : {}),
        ...(input.maxConcurrentRollouts !== undefined ? { maxConcurrentRollouts: input.maxConcurrentRollouts } : {}),
        ...(input.fullWeights ? { fullWeights: input.fullWeights } : {}),
      } satisfies StepManifestInput);
      const text = JSON.stringify(manifest);
      const key = runKeys.stepManifest(input.runId, input.step, createHash('sha256').update(text).digest('hex'));
      const ref = await withStoreErrors(() => storeFor(input.artifacts, store).putJson(key, manifest));
      return { taskSetDir: sampled.taskSetDir, manifest: ref, tasks: sampled.tasks.length, ...(sampled.files ? { files: sampled.files } : {}) };
    },
  } satisfies DatasetActivities;
  return activities;
}
