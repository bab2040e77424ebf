/**
 * Scoring one policy version's eval episodes, pure: pass@k where the
 * environment says what "solved" is, localization where it names the rewards
 * for it (its EvalMetrics), and the rest from every episode's reward.
 */
import type { EvalEpisode, EvalPlan, EvalResult, Prf } from '../contracts/eval';
import type { EvalMetrics, PrfMetric } from '../envs/types';
import { isUnscored, type RolloutSummary } from '../contracts/trajectory';
import type { Task } from '../tasks/schema';

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
 * Whether an episode solved its task, by the environment's `solved` reward; null for an
 * environment that does not say (localization), or a summary without that reward.
 */
export function episodeSolved(summary: RolloutSummary, solved: EvalMetrics['solved']): boolean | null {
  const v = solved ? summary.components[solved.reward] : undefined;
  return typeof v === 'number' ? v >= solved!.min : null;
}

/** Macro-averaged precision / recall / F1 over the episodes given (those whose task has a gold set). */
export function meanPrf(scores: { precision: number; recall: number; f1: number }[]): Prf | null {
  if (scores.length === 0) return null;
  const mean = (f: (s: (typeof scores)[number]) => number) => scores.reduce((a, s) => a + f(s), 0) / scores.length;
  return { precision: mean((s) => s.precision), recall: mean((s) => s.recall), f1: mean((s) => s.f1), episodes: scores.length };
}

const avg = (xs: number[]): number => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);

export interface ScoredEpisode {
  instanceId: string;
  summary: RolloutSummary;
  promptTokens: number;
}

/** One localization metric over the episodes whose task has a gold set; null when none has. */
function localization(metric: PrfMetric | undefined, episodes: ScoredEpisode[], tasks: Map<string, Task>): Prf | null {
  if (!metric) return null;
  const c = (e: ScoredEpisode, name: string) => e.summary.components[name] ?? 0;
  return meanPrf(episodes
    .filter((e) => { const t = tasks.get(e.instanceId); return t !== undefined && (metric.applies?.(t) ?? true); })
    .map((e) => ({ precision: c(e, metric.precision), recall: c(e, metric.recall), f1: c(e, metric.f1) })));
}

/** Aggregates one version's episodes into an EvalResult, with the environment's metrics. Pure. */
export function scoreEval(p: {
  plan: EvalPlan; version: number; episodes: ScoredEpisode[]; errors: number; tasks: Map<string, Task>;
  metrics: EvalMetrics; startedAt: string; finishedAt: string; workflowId?: string;
}): EvalResult {
  const { plan, episodes, metrics } = p;
  const byTask = new Map<string, ScoredEpisode[]>();
  for (const e of episodes) byTask.set(e.instanceId, [...(byTask.get(e.instanceId) ?? []), e]);

  const perTask = [...byTask.entries()].map(([instanceId, eps]) => {
    const outcomes = eps.map((e) => episodeSolved(e.summary, metrics.solved));
    const task = p.tasks.get(instanceId);
    const decided = outcomes.every((o) => o !== null) && task !== undefined && (metrics.solved!.applies?.(task) ?? true);
    return {
      instance_id: instanceId,
      n: eps.length,
      passed: decided ? outcomes.filter((o) => o === true).length : null,
      reward_mean: avg(eps.map((e) => e.summary.reward)),
    };
  });

  // pass@j for j in {1, k}, averaged over tasks the environment decided with all k samples present.
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
    localization: {
      file: localization(metrics.localization?.file, episodes, p.tasks),
      function: localization(metrics.localization?.function, episodes, p.tasks),
    },
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
