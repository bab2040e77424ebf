import type { EvalResult } from '../contracts/eval';
import { PHASES, type PhaseName, type ReportStep } from './records';
import type { ControlAction } from '../contracts/records';
import { COST_KEYS, addCost, type Cost, type CostKey } from '../shared/cost';

/**
 * Turns step records and eval results into the series the report plots. Pure and
 * small, so the numbers in the HTML are tested without a browser.
 */

export interface PhaseRow {
  phase: PhaseName;
  totalMs: number;
  meanMs: number;
  /** Share of the summed phase time (phases may overlap with async_level >= 1, so not of wall time). */
  share: number;
}

/** One control action, with the step whose record holds it. */
export type ControlRow = ControlAction & { recordedWith: number };

export interface ReportData {
  runId: string;
  generatedAt: string;
  summary: {
    steps: number;
    firstStep: number;
    lastStep: number;
    policyVersion: number;
    lastMeanReward: number;
    bestMeanReward: number;
    bestStep: number;
    episodes: number;
    tokens: number;
    wallMs: number;
    startedAt: string;
    finishedAt: string;
  };
  steps: number[];
  reward: { mean: number[]; std: number[]; min: number[]; max: number[] };
  components: Record<string, (number | null)[]>;
  throughput: { episodesPerHour: number[]; tokensPerSecond: number[] };
  phases: PhaseRow[];
  tools: [string, number][];
  shell: [string, number][];
  staleness: [string, number][];
  /**
   * Train/inference mismatch per step, from the trainer's metrics: mean and max
   * |logprob_trainer - logprob_vllm| on the sampled tokens, and the share of tokens the
   * loss's correction masked or capped. null where a step has no trainer metrics.
   */
  mismatch: { absMean: (number | null)[]; absMax: (number | null)[]; maskedFrac: (number | null)[]; cappedFrac: (number | null)[] };
  evals: EvalSeries[];
  /** Every control action recorded with the run's steps (pause, resume, stop, set), oldest first. */
  controls: ControlRow[];
  /** The in-run eval sweeps ([eval] every_steps), oldest first, each with its result where one is stored. */
  evalSweeps: EvalSweepRow[];
  /** Per step with a recorded lineage: its build and the first 12 hex of its batch and adapter sha256. */
  lineage: { step: number; build?: string; batch?: string; adapter?: string }[];
  /** Per step that recorded them: groups rolled out, informative groups, refill rounds and the version that sampled it. */
  signal: { step: number; groups?: number; informative: number; refillRounds: number; sampledBy?: number }[];
  /**
   * The cost ledger: per figure, its total over the report's steps that recorded one, its mean per such
   * step and the last step's; `perStep` for the plot (null where a step has no cost, older records).
   */
  cost: { rows: { key: CostKey; total: number; meanPerStep: number; last: number }[]; steps: number; perStep: Record<CostKey, (number | null)[]> } | null;
  /** Another run's mean reward per step, drawn beside this run's (`ratchet report --baseline`): a control run, say. */
  baseline?: BaselineSeries;
}

/** An in-run eval sweep as the report lists it: the step that started it, and what it found (if it finished). */
export interface EvalSweepRow {
  step: number;
  workflowId: string;
  policyVersion: number;
  taskset: string;
  k: number;
  /** The stored result for that version, task set and k: pass@1 (null without tests) and mean reward. */
  result?: { passAt1: number | null; reward: number; episodes: number };
}

/** Each step's sweep, matched to the stored result of its version on its task set (by name and k). */
export function buildEvalSweepRows(sorted: ReportStep[], evals: EvalResult[]): EvalSweepRow[] {
  return sorted.filter((r) => r.eval_sweep).map((r) => {
    const s = r.eval_sweep!;
    const name = s.taskset.replace(/^.*\//, '').replace(/\.[^.]+$/, '');
    const found = evals.filter((e) => e.policy_version === s.policy_version && e.k === s.k && e.taskset.name === name)
      .sort((a, b) => Number(b.workflow_id === s.workflow_id) - Number(a.workflow_id === s.workflow_id))[0];
    return {
      step: r.step, workflowId: s.workflow_id, policyVersion: s.policy_version, taskset: s.taskset, k: s.k,
      ...(found ? { result: { passAt1: found.pass_at?.['1'] ?? null, reward: found.reward.mean, episodes: found.episodes } } : {}),
    };
  });
}

export interface BaselineSeries {
  runId: string;
  /** Mean reward at each of this report's steps; null where the baseline has no such step. */
  mean: (number | null)[];
}

export interface EvalSeries {
  taskset: string;
  hash: string;
  k: number;
  versions: number[];
  passAt1: (number | null)[];
  passAtK: (number | null)[];
  reward: number[];
  fileF1: (number | null)[];
  functionF1: (number | null)[];
  tokensPerEpisode: number[];
  toolCallsPerEpisode: number[];
}

function stepWallMs(r: ReportStep): number {
  return Math.max(0, Date.parse(r.finished_at) - Date.parse(r.started_at));
}

function trainerMetric(r: ReportStep, key: string): number | null {
  const v = r.trainer?.[key];
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

function episodesOf(r: ReportStep): number {
  return r.episodes ?? r.rollouts;
}

function addInto(into: Map<string, number>, hist: Record<string, number>): void {
  for (const [k, v] of Object.entries(hist)) into.set(k, (into.get(k) ?? 0) + v);
}

const round = (x: number, digits = 4): number => Number(x.toFixed(digits));

/** The baseline's mean reward aligned to the report's steps (matched by step number, not by position). */
export function buildBaselineSeries(baselineRunId: string, baseline: ReportStep[], steps: number[]): BaselineSeries {
  const byStep = new Map(baseline.map((r) => [r.step, r.reward.mean]));
  return { runId: baselineRunId, mean: steps.map((s) => byStep.get(s) ?? null) };
}

export function buildReportData(runId: string, records: ReportStep[], evals: EvalResult[], now = new Date(),
  baseline?: { runId: string; records: ReportStep[] }): ReportData {
  if (records.length === 0) throw new Error('buildReportData needs at least one step record');
  const sorted = [...records].sort((a, b) => a.step - b.step);
  const first = sorted[0]!;
  const last = sorted[sorted.length - 1]!;

  const componentNames = [...new Set(sorted.flatMap((r) => Object.keys(r.components)))].sort();
  const components: Record<string, (number | null)[]> = {};
  for (const name of componentNames) components[name] = sorted.map((r) => r.components[name] ?? null);

  let best = first;
  for (const r of sorted) if (r.reward.mean > best.reward.mean) best = r;

  const phaseTotals = PHASES.map((p) => sorted.reduce((s, r) => s + r.phase_ms[p], 0));
  const phaseSum = phaseTotals.reduce((a, b) => a + b, 0);
  const phases: PhaseRow[] = PHASES.map((phase, i) => ({
    phase,
    totalMs: phaseTotals[i]!,
    meanMs: round(phaseTotals[i]! / sorted.length, 1),
    share: phaseSum > 0 ? round(phaseTotals[i]! / phaseSum) : 0,
  }));

  const tools = new Map<string, number>();
  const shell = new Map<string, number>();
  const staleness = new Map<string, number>();
  for (const r of sorted) {
    addInto(tools, r.tool_calls);
    addInto(shell, r.shell_commands);
    addInto(staleness, r.staleness);
  }
  const byCountDesc = (m: Map<string, number>): [string, number][] => [...m.entries()].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]));

  const startedAt = sorted.reduce((m, r) => (Date.parse(r.started_at) < Date.parse(m) ? r.started_at : m), first.started_at);
  const finishedAt = sorted.reduce((m, r) => (Date.parse(r.finished_at) > Date.parse(m) ? r.finished_at : m), last.finished_at);

  return {
    runId,
    generatedAt: now.toISOString(),
    summary: {
      steps: sorted.length,
      firstStep: first.step,
      lastStep: last.step,
      policyVersion: Math.max(...sorted.map((r) => r.policy_version)),
      lastMeanReward: last.reward.mean,
      bestMeanReward: best.reward.mean,
      bestStep: best.step,
      episodes: sorted.reduce((s, r) => s + episodesOf(r), 0),
      tokens: sorted.reduce((s, r) => s + r.tokens, 0),
      wallMs: Math.max(0, Date.parse(finishedAt) - Date.parse(startedAt)),
      startedAt,
      finishedAt,
    },
    steps: sorted.map((r) => r.step),
    reward: {
      mean: sorted.map((r) => r.reward.mean),
      std: sorted.map((r) => r.reward.std),
      min: sorted.map((r) => r.reward.min),
      max: sorted.map((r) => r.reward.max),
    },
    components,
    throughput: {
      episodesPerHour: sorted.map((r) => { const ms = stepWallMs(r); return ms > 0 ? round(episodesOf(r) / (ms / 3_600_000), 1) : 0; }),
      tokensPerSecond: sorted.map((r) => { const ms = stepWallMs(r); return ms > 0 ? round(r.tokens / (ms / 1000), 1) : 0; }),
    },
    phases,
    tools: byCountDesc(tools),
    shell: byCountDesc(shell).slice(0, 20),
    staleness: [...staleness.entries()].sort((a, b) => Number(a[0]) - Number(b[0])),
    mismatch: {
      absMean: sorted.map((r) => trainerMetric(r, 'mismatch_abs_mean')),
      absMax: sorted.map((r) => trainerMetric(r, 'mismatch_abs_max')),
      maskedFrac: sorted.map((r) => trainerMetric(r, 'mismatch_masked_frac')),
      cappedFrac: sorted.map((r) => trainerMetric(r, 'mismatch_capped_frac')),
    },
    evals: buildEvalSeries(evals),
    controls: sorted.flatMap((r) => (r.control ?? []).map((a) => ({ ...a, recordedWith: r.step }))),
    evalSweeps: buildEvalSweepRows(sorted, evals),
    lineage: sorted.filter((r) => r.lineage).map((r) => ({
      step: r.step,
      ...(r.lineage!.build ? { build: `${r.lineage!.build.deployment}.${r.lineage!.build.build_id}` } : {}),
      ...(r.lineage!.batch_sha256 ? { batch: r.lineage!.batch_sha256.slice(0, 12) } : {}),
      ...(r.lineage!.trainer.adapter_sha256 ? { adapter: r.lineage!.trainer.adapter_sha256.slice(0, 12) } : {}),
    })),
    signal: sorted.filter((r) => r.informative_groups !== undefined).map((r) => ({
      step: r.step, informative: r.informative_groups!, refillRounds: r.refill_rounds ?? 0,
      ...(r.groups !== undefined ? { groups: r.groups } : {}),
      ...(r.sampling_policy_version !== undefined ? { sampledBy: r.sampling_policy_version } : {}),
    })),
    cost: buildCostData(sorted),
    ...(baseline ? { baseline: buildBaselineSeries(baseline.runId, baseline.records, sorted.map((r) => r.step)) } : {}),
  };
}

/** The cost table and plot's numbers: the sums are of the steps' own figures (not of run_cost, which a fallback could void). */
export function buildCostData(sorted: ReportStep[]): ReportData['cost'] {
  const costed = sorted.filter((r) => r.cost);
  if (!costed.length) return null;
  const total: Cost = costed.reduce<Cost>((a, r) => addCost(a, r.cost), addCost(undefined, undefined));
  const lastCost = costed[costed.length - 1]!.cost!;
  return {
    steps: costed.length,
    rows: COST_KEYS.map((key) => ({ key, total: total[key], meanPerStep: round(total[key] / costed.length, 3), last: lastCost[key] })),
    perStep: Object.fromEntries(COST_KEYS.map((k) => [k, sorted.map((r) => (r.cost ? r.cost[k] : null))])) as Record<CostKey, (number | null)[]>,
  };
}

/** One series per task set (by hash), across policy versions. */
export function buildEvalSeries(evals: EvalResult[]): EvalSeries[] {
  const groups = new Map<string, EvalResult[]>();
  for (const e of evals) {
    const key = `${e.taskset.hash}|${e.k}`;
    groups.set(key, [...(groups.get(key) ?? []), e]);
  }
  return [...groups.values()].map((list) => {
    const sorted = [...list].sort((a, b) => a.policy_version - b.policy_version);
    const head = sorted[0]!;
    return {
      taskset: head.taskset.name,
      hash: head.taskset.hash,
      k: head.k,
      versions: sorted.map((e) => e.policy_version),
      passAt1: sorted.map((e) => e.pass_at?.['1'] ?? null),
      passAtK: sorted.map((e) => e.pass_at?.[String(e.k)] ?? null),
      reward: sorted.map((e) => e.reward.mean),
      fileF1: sorted.map((e) => e.localization.file?.f1 ?? null),
      functionF1: sorted.map((e) => e.localization.function?.f1 ?? null),
      tokensPerEpisode: sorted.map((e) => e.per_episode.tokens),
      toolCallsPerEpisode: sorted.map((e) => e.per_episode.tool_calls),
    };
  });
}
