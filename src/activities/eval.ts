/**
 * EvalSweep's activities (task queue `ratchet`): plan a sweep (resolve versions,
 * validate and hash the task set, skip what is already evaluated) and record one
 * policy version's results. Episodes themselves run through the rollout worker's
 * `rollout` activity, the same code path training uses.
 */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { runKeys } from '../artifacts/keys';
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { ArtifactStore } from '../artifacts/store';
import { sha256 } from '../artifacts/store';
import { storeFor, storeForRef } from '../artifacts/stores';
import type { RunConfig } from '../config/schema';
import { bareFunction, setScores } from '../envs/swe-grep/rewards';
import { normalizePath } from '../envs/shell';
import type { EvalResult, Prf } from '../report/records';
import { isUnscored, type RolloutSummary, type Trajectory } from '../rollouts/trajectory';
import type { Logger } from '../shared/logger';
import { paths } from '../shared/paths';
import { loadTasks, TaskLoadError } from '../tasks/load';
import { goldFiles, type Task } from '../tasks/schema';
import { evalEpisodesTotal } from '../metrics';
import { forActivity, livenessOf, type LivenessWindows } from '../shared/liveness';
import { withLiveness, type Liveness } from './liveness';

export interface EvalSweepInput {
  runId: string;
  /** Explicit policy versions; wins over `newest`. */
  versions?: number[];
  /** The newest N policy versions the run has produced (default 1). */
  newest?: number;
  /** A task set name under the task dir (`heldout` → .ratchet/tasks/heldout.jsonl) or a file path. */
  taskset?: string;
  /** Samples per task (pass@k's n). */
  k?: number;
  /** Re-evaluate versions that already have a result for this task set. */
  force?: boolean;
  /** In-flight rollouts at once. */
  maxConcurrent?: number;
  /**
   * The run's [artifacts] store (never a credential): the sweep reads the run and
   * writes its results there. Absent (inputs from before this field): the worker's
   * default store, RATCHET_ARTIFACTS_URL or the local directory.
   */
  artifacts?: StoreSettings;
}

export interface EvalTaskRef {
  instanceId: string;
  datasetPath: string;
  hasTests: boolean;
}

export interface EvalPlan {
  runId: string;
  taskset: { name: string; path: string; hash: string; tasks: number };
  k: number;
  versions: number[];
  skipped: number[];
  tasks: EvalTaskRef[];
  envId: string;
  taskSetDir: string;
  sampling: RunConfig['sampling'];
  envArgs: RunConfig['env'][number]['args'];
  rubric: RunConfig['env'][number]['rubric'];
  sandbox: RunConfig['sandbox'];
  inferenceBaseUrl: string;
  servedModel: string;
  seed: number;
  /** The run's [liveness] windows; absent in plans recorded before the section existed. */
  liveness?: LivenessWindows;
  /** Each planned version's adapter (version > 0), served before its episodes run. */
  adapters: Record<string, ArtifactRef>;
  /** The sweep input's store settings; absent in plans of sweeps started without them. */
  artifacts?: StoreSettings;
  /** The run's inference.sync_task_queues: each inference host's worker pulls and loads the adapter. */
  syncTaskQueues?: string[];
}

export interface EvalEpisode {
  instanceId: string;
  sample: number;
  summary?: RolloutSummary;
  /** The rollout failed after its retries; counted in `errors`, not in the scores (so are infra_error and setup_error). */
  error?: string;
}

export interface RecordEvalInput {
  plan: EvalPlan;
  version: number;
  episodes: EvalEpisode[];
  startedAt: string;
  finishedAt: string;
  workflowId?: string;
}

/** What the workflow keeps in its memo per version: small. */
export interface EvalVersionSummary {
  version: number;
  key: string;
  passAt1: number | null;
  passAtK: number | null;
  meanReward: number;
  fileF1: number | null;
  functionF1: number | null;
  episodes: number;
  errors: number;
}

/** Keeps one version's rollout results far below Temporal's 2 MB payload limit. */
export const MAX_EPISODES_PER_VERSION = 2_000;

// ---------------------------------------------------------------- pure scoring

/**
 * Unbiased pass@k (Chen et al. 2021): 1 - C(n-c, k) / C(n, k), as a product so
 * large n does not overflow. n samples, c of them passed.
 */
export function passAtK(n: number, c: number, k: number): number {
  if (k <= 0 || n <= 0) throw new RangeError(`pass@k needs n > 0 and k > 0 (got n=${n}, k=${k})`);
  if (c < 0 || c > n) throw new RangeError(`pass@k needs 0 <= c <= n (got c=${c}, n=${n})`);
  if (k > n) throw new RangeError(`pass@${k} needs at least ${k} samples per task (got n=${n})`);
  if (n - c < k) return 1;
  let prod = 1;
  for (let i = n - c + 1; i <= n; i++) prod *= 1 - k / i;
  return 1 - prod;
}

/**
 * An episode passed when the task's tests decided it: code-repair's `tests_pass`,
 * or debug's `fail_to_pass` (1 only when every FAIL_TO_PASS test passes and no
 * PASS_TO_PASS test broke). Null for an environment without tests (localization).
 */
export function episodePassed(summary: RolloutSummary): boolean | null {
  const v = summary.components.tests_pass ?? summary.components.fail_to_pass;
  return typeof v === 'number' ? v >= 1 : null;
}

const strings = (v: unknown): string[] => (Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : []);

/** Macro-averaged precision / recall / F1 over episodes whose task has a gold set. */
export function meanPrf(pairs: { predicted: string[]; gold: string[] }[]): Prf | null {
  const scored = pairs.filter((p) => p.gold.length > 0).map((p) => setScores(p.predicted, p.gold));
  if (scored.length === 0) return null;
  const mean = (f: (s: (typeof scored)[number]) => number) => scored.reduce((a, s) => a + f(s), 0) / scored.length;
  return { precision: mean((s) => s.precision), recall: mean((s) => s.recall), f1: mean((s) => s.f1), episodes: scored.length };
}

const avg = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

export interface ScoredEpisode {
  instanceId: string;
  summary: RolloutSummary;
  /** The environment's final answer, from the trajectory (files, functions, diff...). */
  final: Record<string, unknown>;
  promptTokens: number;
}

/** Aggregates one version's episodes into an EvalResult. Pure. */
export function scoreEval(p: {
  plan: EvalPlan; version: number; episodes: ScoredEpisode[]; errors: number; tasks: Map<string, Task>;
  startedAt: string; finishedAt: string; workflowId?: string;
}): EvalResult {
  const { plan, episodes } = p;
  const byTask = new Map<string, ScoredEpisode[]>();
  for (const e of episodes) byTask.set(e.instanceId, [...(byTask.get(e.instanceId) ?? []), e]);

  const perTask = [...byTask.entries()].map(([instanceId, eps]) => {
    const outcomes = eps.map((e) => episodePassed(e.summary));
    const decided = outcomes.every((o) => o !== null) && (p.tasks.get(instanceId)?.FAIL_TO_PASS.length ?? 0) > 0;
    return {
      instance_id: instanceId,
      n: eps.length,
      passed: decided ? outcomes.filter((o) => o === true).length : null,
      reward_mean: avg(eps.map((e) => e.summary.reward)),
    };
  });

  // pass@j for j in {1, k}, averaged over tasks the tests decided with all k samples present.
  const decided = perTask.filter((t) => t.passed !== null && t.n >= plan.k);
  let passAt: Record<string, number> | null = null;
  if (decided.length > 0) {
    passAt = {};
    for (const j of [...new Set([1, plan.k])]) passAt[String(j)] = avg(decided.map((t) => passAtK(t.n, t.passed!, j)));
  }

  const rewards = episodes.map((e) => e.summary.reward);
  const meanReward = avg(rewards);
  const componentNames = [...new Set(episodes.flatMap((e) => Object.keys(e.summary.components)))].sort();
  const components = Object.fromEntries(componentNames.map((n) => [n, avg(episodes.map((e) => e.summary.components[n] ?? 0))]));

  const goldFns = (id: string) => (p.tasks.get(id)?.gold_functions ?? []).map(bareFunction);
  const goldFs = (id: string) => { const t = p.tasks.get(id); return t ? goldFiles(t).map(normalizePath) : []; };
  const fileLoc = meanPrf(episodes.map((e) => ({ predicted: strings(e.final.files).map(normalizePath).filter(Boolean), gold: goldFs(e.instanceId) })));
  const fnLoc = meanPrf(episodes.map((e) => ({ predicted: strings(e.final.functions).map(bareFunction).filter(Boolean), gold: goldFns(e.instanceId) })));
  // Localization only means something for an environment that answers with files.
  const answersFiles = episodes.some((e) => 'files' in e.final || 'functions' in e.final);

  const minutes = Math.max(1e-9, (Date.parse(p.finishedAt) - Date.parse(p.startedAt)) / 60_000);
  return {
    format: 'ratchet.eval/v1',
    run_id: plan.runId,
    policy_version: p.version,
    taskset: plan.taskset,
    k: plan.k,
    episodes: episodes.length,
    pass_at: passAt,
    reward: { mean: meanReward, std: Math.sqrt(avg(rewards.map((r) => (r - meanReward) ** 2))) },
    components,
    localization: { file: answersFiles ? fileLoc : null, function: answersFiles ? fnLoc : null },
    per_episode: {
      tokens: avg(episodes.map((e) => e.summary.completion_tokens + e.promptTokens)),
      tool_calls: avg(episodes.map((e) => e.summary.tool_calls)),
    },
    per_task: perTask,
    errors: p.errors,
    workflow_id: p.workflowId,
    started_at: p.startedAt,
    finished_at: p.finishedAt,
    episodes_per_minute: episodes.length / minutes,
  };
}

/**
 * The episodes an eval scores, and how many it counts as errors: one that failed outright,
 * or one the infrastructure ended or whose task could not be set up (infra_error,
 * setup_error), which says nothing about the policy and so is never a zero score. Pure.
 */
export function splitEpisodes(episodes: EvalEpisode[]): { counted: (EvalEpisode & { summary: RolloutSummary })[]; errors: number } {
  const counted = episodes.filter((e): e is EvalEpisode & { summary: RolloutSummary } => e.summary !== undefined && !isUnscored(e.summary));
  return { counted, errors: episodes.length - counted.length };
}

export function evalKey(runId: string, version: number, tasksetHash: string): string {
  return runKeys.evalResult(runId, version, tasksetHash);
}

/** `heldout` → <tasks>/heldout.jsonl; anything with a slash or an extension is a path. */
export function resolveTaskset(taskset: string, taskDir = paths.tasks()): { name: string; file: string } {
  if (taskset.includes('/') || /\.(jsonl|json|ndjson|parquet)$/i.test(taskset)) {
    const file = path.resolve(taskset);
    return { name: path.basename(file).replace(/\.[^.]+$/, ''), file };
  }
  return { name: taskset, file: path.join(taskDir, `${taskset}.jsonl`) };
}

/** Validates a task set for evaluation; a non-retryable failure names the file, rows and fix. */
export async function loadEvalTaskset(taskset: string): Promise<{ name: string; file: string; hash: string; tasks: Task[] }> {
  const { name, file } = resolveTaskset(taskset);
  let bytes: Buffer;
  try {
    bytes = await fs.readFile(file);
  } catch {
    throw ApplicationFailure.nonRetryable(`task set "${taskset}" not found: no file ${file}. ` +
      'Fix: generate it (bash infra/tasks.sh) or pass --taskset <path/to/tasks.jsonl>.', 'TaskSetNotFound');
  }
  let tasks: Task[];
  try {
    tasks = (await loadTasks(file)).tasks;
  } catch (err) {
    if (err instanceof TaskLoadError) throw ApplicationFailure.nonRetryable(`task set ${file} failed validation:\n${err.message}`, 'TaskSetInvalid');
    throw ApplicationFailure.nonRetryable(`task set ${file}: ${(err as Error).message}`, 'TaskSetInvalid');
  }
  if (tasks.length === 0) throw ApplicationFailure.nonRetryable(`task set ${file} has no tasks. Fix: point --taskset at a non-empty JSONL file.`, 'TaskSetInvalid');
  return { name, file, hash: sha256(bytes).slice(0, 16), tasks };
}

// ---------------------------------------------------------------- activities

export interface EvalDeps {
  store: ArtifactStore;
  logger: Logger;
}

async function readJson<T>(store: ArtifactStore, key: string): Promise<T | undefined> {
  const buf = await store.read(key);
  return buf && (JSON.parse(buf.toString('utf8')) as T);
}

/** Policy versions the run has produced (0, the base model, and each finished step's), with their adapters. */
export async function runVersions(store: ArtifactStore, runId: string): Promise<Map<number, ArtifactRef | undefined>> {
  const versions = new Map<number, ArtifactRef | undefined>([[0, undefined]]);
  const text = (await store.read(runKeys.metrics(runId)))?.toString('utf8') ?? '';
  for (const line of text.split('\n')) {
    if (!line.trim()) continue;
    try {
      const r = JSON.parse(line) as { policy_version?: unknown; adapter?: ArtifactRef };
      const v = r.policy_version;
      if (typeof v === 'number' && Number.isInteger(v) && v >= 0) versions.set(v, r.adapter);
    } catch { /* a torn line: the metrics writer owns repairs */ }
  }
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

export function createEvalActivities({ store: workerStore, logger }: EvalDeps) {
  return {
    async evalPlan(input: EvalSweepInput): Promise<EvalPlan> {
      const { runId } = input;
      // The run's own store when the sweep names one; the worker's default otherwise (old inputs).
      const store = storeFor(input.artifacts, workerStore);
      const config = await readJson<RunConfig>(store, runKeys.config(runId));
      if (!config) throw runNotFound(runId, store.url, Boolean(input.artifacts));
      const k = input.k ?? 4;
      if (!Number.isInteger(k) || k < 1) throw ApplicationFailure.nonRetryable(`k must be a positive integer (got ${k})`, 'InvalidInput');
      const ts = await loadEvalTaskset(input.taskset ?? 'heldout');
      if (ts.tasks.length * k > MAX_EPISODES_PER_VERSION) {
        throw ApplicationFailure.nonRetryable(`${ts.tasks.length} tasks × k=${k} = ${ts.tasks.length * k} episodes per version is over ${MAX_EPISODES_PER_VERSION}. ` +
          'Fix: split the task set or lower --k.', 'InvalidInput');
      }
      const adapterOf = await runVersions(store, runId);
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
        if (!input.force && (await store.exists(evalKey(runId, v, ts.hash)))) skipped.push(v);
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
        adapters: Object.fromEntries(versions.filter((v) => v > 0 && adapterOf.get(v)).map((v) => [String(v), adapterOf.get(v)!])),
        ...(input.artifacts ? { artifacts: input.artifacts } : {}),
        ...(config.inference.sync_task_queues?.length ? { syncTaskQueues: config.inference.sync_task_queues } : {}),
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
    const scored: ScoredEpisode[] = [];
    const { counted, errors } = splitEpisodes(input.episodes);
    for (const e of counted) {
      // The final answer (predicted files...) lives only in the trajectory: claim check, verified.
      const traj = await storeForRef(e.summary.trajectory, plan.artifacts, workerStore).getJson<Trajectory>(e.summary.trajectory);
      scored.push({ instanceId: e.instanceId, summary: e.summary, final: traj.final ?? {}, promptTokens: traj.stats?.prompt_tokens ?? 0 });
      live.progress({ phase: 'reading trajectories', read: scored.length, of: input.episodes.length });
    }
    const result = scoreEval({ plan, version, episodes: scored, errors, tasks, startedAt: input.startedAt, finishedAt: input.finishedAt, workflowId: input.workflowId });
    const key = evalKey(plan.runId, version, plan.taskset.hash);
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

export type EvalActivities = ReturnType<typeof createEvalActivities>;
