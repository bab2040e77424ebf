/**
 * EvalSweep's activities (task queue `ratchet`): plan a sweep (resolve versions,
 * validate and hash the task set, skip what is already evaluated) and record one
 * policy version's results. Episodes themselves run through the rollout worker's
 * `rollout` activity, the same code path training uses.
 */
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { runKeys } from '../artifacts/keys';
import type { ArtifactRef } from '../artifacts/ref';
import { readRunRecords } from '../records/runRecords';
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, storeForRef } from '../artifacts/stores';
import type { RunConfig } from '../config/schema';
import { MAX_EPISODES_PER_VERSION } from '../config/evalBounds';
import type { EvalActivities, EvalPlan, EvalSweepInput, EvalVersionSummary, RecordEvalInput } from '../contracts/eval';
import type { Environment } from '../envs/types';
import { scoreEval, splitEpisodes, type ScoredEpisode } from '../evals/scoring';
import { loadEvalTaskset } from '../evals/tasksets';
import type { Trajectory } from '../contracts/trajectory';
import type { Logger } from '../shared/logger';
import { evalEpisodesTotal } from '../metrics';
import { forActivity, livenessOf } from '../shared/liveness';
import { createEnvironmentResolver } from './environments';
import { withLiveness, type Liveness } from './liveness';

/** Keeps one version's rollout results far below Temporal's 2 MB payload limit (src/config/evalBounds.ts). */
export { MAX_EPISODES_PER_VERSION };

export interface EvalDeps {
  store: ArtifactStore;
  logger: Logger;
}

async function readJson<T>(store: ArtifactStore, key: string): Promise<T | undefined> {
  const buf = await store.read(key);
  return buf && (JSON.parse(buf.toString('utf8')) as T);
}

/**
 * Policy versions the run has produced, with their adapters: 0 (the base model, or the adapter the
 * run started from with `[model] init_from`, which the run served as its version 0) and each
 * finished step's.
 */
export async function runVersions(store: ArtifactStore, runId: string, runConfig?: RunConfig): Promise<Map<number, ArtifactRef | undefined>> {
  // The caller's copy of the run's config when it has one (evalPlan read it already).
  const config = runConfig ?? await readJson<RunConfig>(store, runKeys.config(runId));
  const versions = new Map<number, ArtifactRef | undefined>([[0, config?.model.init?.adapter]]);
  const text = (await store.read(runKeys.metrics(runId)))?.toString('utf8') ?? '';
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      const r = JSON.parse(line) as { policy_version?: unknown; adapter?: ArtifactRef };
      const v = r.policy_version;
      if (typeof v === 'number' && Number.isInteger(v) && v >= 0) versions.set(v, r.adapter);
    } catch { /* a torn line: the metrics writer owns repairs */ }
  }
  // Appended records (0.6 on): the winners, so a version retrained after a checkpoint fallback names its new adapter.
  for (const r of (await readRunRecords(store, runId, { legacy: false })).steps) versions.set(r.policy_version, r.adapter);
  return versions;
}

export async function availableVersions(store: ArtifactStore, runId: string): Promise<number[]> {
  return [...(await runVersions(store, runId)).keys()].sort((a, b) => a - b);
}

/** The run is not in this store: names the run, the store's URL and the fix. */
export function runNotFound(runId: string, storeUrl: string, fromInput: boolean): ApplicationFailure {
  const fix = fromInput
    ? 'Fix: pass the run\'s own config (`ratchet eval --config <run.toml>`) so the sweep uses its [artifacts] store, or correct [artifacts] url/endpoint there'
    : 'Fix: pass the run\'s config (`ratchet eval --config <run.toml>`) so the sweep uses its [artifacts] store, or set RATCHET_ARTIFACTS_URL on the workers';
  return ApplicationFailure.nonRetryable(`run "${runId}" not found: no ${runKeys.config(runId)} in the artifact store ${storeUrl}. ` +
    `${fix}; check the id with \`ratchet status\`.`, 'RunNotFound');
}

export function createEvalActivities({ store: workerStore, logger }: EvalDeps): EvalActivities {
  const environmentFor = createEnvironmentResolver(workerStore);

  return {
    async evalPlan(input: EvalSweepInput): Promise<EvalPlan> {
      const { runId } = input;
      // The run's own store when the sweep names one; the worker's default otherwise (old inputs).
      const store = storeFor(input.artifacts, workerStore);
      const config = await readJson<RunConfig>(store, runKeys.config(runId));
      if (!config) throw runNotFound(runId, store.url, Boolean(input.artifacts));
      // A sweep serves each version as an adapter; a full run's versions are whole checkpoints (issue 41).
      if ((config.trainer as { mode?: string } | undefined)?.mode === 'full') {
        throw ApplicationFailure.nonRetryable(`run "${runId}" trains every weight (trainer.mode = "full"): an eval sweep serves each version as a LoRA adapter, ` +
          'which a full run has none of. Fix: evaluate its checkpoints\' model/ directories on a vLLM of their own (docs/gpu.md, "Full fine-tuning")', 'InvalidInput');
      }
      const k = input.k ?? 4;
      if (input.seeds !== undefined && input.seeds !== 'run' && input.seeds !== 'task-sample') {
        throw ApplicationFailure.nonRetryable(`seeds must be "run" or "task-sample" (got ${JSON.stringify(input.seeds)}). ` +
          'Fix: "task-sample" seeds each episode by its task and sample only (common random numbers across runs).', 'InvalidInput');
      }
      if (!Number.isInteger(k) || k < 1) throw ApplicationFailure.nonRetryable(`k must be a positive integer (got ${k})`, 'InvalidInput');
      const ts = await loadEvalTaskset(input.taskset ?? 'heldout');
      if (ts.tasks.length * k > MAX_EPISODES_PER_VERSION) {
        throw ApplicationFailure.nonRetryable(`${ts.tasks.length} tasks × k=${k} = ${ts.tasks.length * k} episodes per version is over ${MAX_EPISODES_PER_VERSION}. ` +
          'Fix: split the task set or lower --k.', 'InvalidInput');
      }
      const adapterOf = await runVersions(store, runId, config);
      const available = [...adapterOf.keys()].sort((a, b) => a - b);
      let wanted: number[];
      if (input.versions && input.versions.length > 0) {
        const missing = input.versions.filter((v) => !available.includes(v));
        if (missing.length) {
          throw ApplicationFailure.nonRetryable(`run "${runId}" has no policy version ${missing.join(', ')} (it has ${available.join(', ')}). ` +
            'Fix: pick versions from that list, or use --newest N.', 'VersionNotFound');
        }
        wanted = [...new Set(input.versions)].sort((a, b) => a - b);
      } else {
        wanted = available.slice(-(input.newest ?? 1));
      }
      const versions: number[] = [];
      const skipped: number[] = [];
      for (const v of wanted) {
        if (!input.force && (await store.exists(runKeys.evalResult(runId, v, ts.hash)))) skipped.push(v);
        else versions.push(v);
      }
      const env = config.env[0];
      const plan: EvalPlan = {
        runId,
        taskset: { name: ts.name, path: ts.file, hash: ts.hash, tasks: ts.tasks.length },
        k,
        versions,
        skipped,
        tasks: ts.tasks.map((t) => ({ instanceId: t.instance_id, datasetPath: ts.file, hasTests: t.FAIL_TO_PASS.length > 0 })),
        envId: env.id,
        taskSetDir: path.dirname(ts.file),
        sampling: config.sampling,
        envArgs: env.args,
        rubric: env.rubric,
        sandbox: config.sandbox,
        inferenceBaseUrl: config.inference.base_urls[0],
        servedModel: config.inference.served_model,
        seed: config.orchestrator.seed,
        liveness: livenessOf(config),
        adapters: Object.fromEntries(versions.filter((v) => adapterOf.get(v)).map((v) => [String(v), adapterOf.get(v)!])),
        ...(input.artifacts ? { artifacts: input.artifacts } : {}),
        ...(config.inference.sync_task_queues?.length ? { syncTaskQueues: config.inference.sync_task_queues } : {}),
        ...(input.seeds === 'task-sample' ? { seeds: 'task-sample' as const } : {}),
      };
      logger.info({ runId, taskset: plan.taskset, k, versions, skipped }, 'eval sweep planned');
      return plan;
    },

    /** Scores one version's episodes and writes runs/<run>/evals/<version>/<hash>.json. Idempotent. */
    async evalRecord(input: RecordEvalInput): Promise<EvalVersionSummary> {
      const w = forActivity(livenessOf(input.plan), 'rollout');
      return withLiveness({ name: 'evalRecord', heartbeatEveryMs: w.heartbeat_every_s * 1000, stallMs: w.stall_s * 1000, logger },
        (live) => recordVersion(input, live));
    },
  };

  async function recordVersion(input: RecordEvalInput, live: Liveness): Promise<EvalVersionSummary> {
    const { plan, version } = input;
    const store = storeFor(plan.artifacts, workerStore);
    const ts = await loadEvalTaskset(plan.taskset.path);
    if (ts.hash !== plan.taskset.hash) {
      throw ApplicationFailure.nonRetryable(`task set ${plan.taskset.path} changed during the sweep (hash ${plan.taskset.hash} → ${ts.hash}). ` +
        'Fix: do not edit a task set while it is evaluated; trigger the sweep again.', 'TaskSetChanged');
    }
    const tasks = new Map(ts.tasks.map((t) => [t.instance_id, t]));
    // What "solved" means and which rewards are metrics is the environment's to say.
    let env: Environment;
    try {
      env = await environmentFor(plan.runId, plan.envId, plan.artifacts);
    } catch (err) {
      throw ApplicationFailure.nonRetryable(`eval of run "${plan.runId}": environment "${plan.envId}" cannot be loaded: ${(err as Error).message}`, 'EnvironmentError');
    }
    const scored: ScoredEpisode[] = [];
    const { counted, errors } = splitEpisodes(input.episodes);
    for (const e of counted) {
      // The prompt's size lives only in the trajectory: claim check, verified.
      const traj = await storeForRef(e.summary.trajectory, plan.artifacts, workerStore).getJson<Trajectory>(e.summary.trajectory);
      scored.push({ instanceId: e.instanceId, summary: e.summary, promptTokens: traj.stats?.prompt_tokens ?? 0 });
      live.progress({ phase: 'reading trajectories', read: scored.length, of: input.episodes.length });
    }
    const result = scoreEval({ plan, version, episodes: scored, errors, tasks, metrics: env.evalMetrics ?? {}, startedAt: input.startedAt, finishedAt: input.finishedAt, workflowId: input.workflowId });
    const key = runKeys.evalResult(plan.runId, version, plan.taskset.hash);
    await store.putJson(key, result);
    evalEpisodesTotal.inc(result.episodes);
    logger.info({ runId: plan.runId, version, key, passAt: result.pass_at, reward: result.reward.mean, errors }, 'eval recorded');
    return {
      version,
      key,
      passAt1: result.pass_at?.['1'] ?? null,
      passAtK: result.pass_at?.[String(plan.k)] ?? null,
      meanReward: result.reward.mean,
      fileF1: result.localization.file?.f1 ?? null,
      functionF1: result.localization.function?.f1 ?? null,
      episodes: result.episodes,
      errors,
    };
  }
}
