import type { StepRecord } from '../contracts/records';
import { mulberry32 } from '../shared/random';
import type { EvalResult } from '../contracts/eval';
import { reportStep, type ReportStep } from './records';

/**
 * Plausible synthetic run data for the report's tests and benchmark: a rising,
 * noisy reward, GRPO-like phase times, a tool mix of a localization agent.
 * Deterministic (seeded), so a screenshot diff means the renderer changed.
 */

/** A synthetic run's metrics.jsonl lines, as TrainRun writes them. */
export function syntheticStepRecords(steps: number, seed = 7, start = new Date('2025-01-01T00:00:00Z'), runId = 'synthetic'): StepRecord[] {
  const r = mulberry32(seed);
  const records: StepRecord[] = [];
  let t = start.getTime();
  const tools = ['bash', 'result'];
  const shell = ['rg', 'grep', 'cat', 'ls', 'find', 'sed', 'head', 'git', 'python3', 'wc'];
  for (let step = 0; step < steps; step++) {
    const progress = steps > 1 ? step / (steps - 1) : 0;
    const mean = -0.4 + 1.3 * (1 - Math.exp(-3 * progress)) + (r() - 0.5) * 0.15;
    const std = 0.35 - 0.15 * progress + r() * 0.05;
    const rollouts = 16;
    const phase = {
      rollout: Math.round(42_000 + r() * 12_000 - 10_000 * progress),
      scoring: Math.round(3_000 + r() * 1_500),
      batch: Math.round(900 + r() * 400),
      train: Math.round(18_000 + r() * 3_000),
      sync: Math.round(1_200 + r() * 500),
    };
    const wall = phase.rollout + phase.scoring + phase.batch + phase.train + phase.sync;
    const toolCalls: Record<string, number> = {};
    for (const tool of tools) toolCalls[tool] = Math.round((tool === 'bash' ? 60 : 14) * (0.8 + r() * 0.4));
    const shellCounts: Record<string, number> = {};
    shell.forEach((cmd, i) => { shellCounts[cmd] = Math.round((40 / (i + 1)) * (0.6 + r() * 0.8)); });
    const stale0 = Math.round(rollouts * (0.55 + r() * 0.2));
    const rewardMin = mean - 2 * std - r() * 0.2;
    const rewardMax = mean + 2 * std + r() * 0.2;
    const components = {
      correct_files: Math.min(1, Math.max(0, 0.15 + 0.6 * progress + (r() - 0.5) * 0.1)),
      incorrect_file_penalty: -Math.max(0, 0.4 - 0.3 * progress + (r() - 0.5) * 0.08),
      missed_file_penalty: -Math.max(0, 0.5 - 0.35 * progress + (r() - 0.5) * 0.08),
      completion_bonus: Math.min(1, 0.3 + 0.6 * progress + (r() - 0.5) * 0.1),
      max_tokens_penalty: -Math.max(0, 0.1 - 0.08 * progress),
    };
    const episodes = rollouts - (r() < 0.1 ? 1 : 0);
    const tokens = Math.round(rollouts * (2_400 + r() * 800));
    records.push({
      format: 'ratchet.step/v1',
      run_id: runId,
      step,
      time: new Date(t + wall).toISOString(),
      started_at: new Date(t).toISOString(),
      policy_version: step + 1,
      mean_reward: mean,
      reward_std: std,
      reward_min: rewardMin,
      reward_max: rewardMax,
      reward_components: components,
      rollouts,
      episodes,
      samples: rollouts,
      dropped: {},
      stop_reasons: { completed: episodes, ...(episodes < rollouts ? { infra_error: rollouts - episodes } : {}) },
      mean_staleness: (rollouts - stale0) / rollouts,
      completion_tokens: tokens,
      tool_calls: Object.values(toolCalls).reduce((a, b) => a + b, 0),
      tool_calls_by_tool: toolCalls,
      shell_commands: shellCounts,
      staleness_histogram: { 0: stale0, 1: rollouts - stale0 },
      trainer: {},
      timing_ms: {
        step: wall,
        rollouts_waited: phase.rollout,
        scoring: phase.scoring,
        build_batch: phase.batch,
        train_and_save: phase.train,
        weight_sync: phase.sync,
      },
    });
    t += wall + Math.round(r() * 500);
  }
  return records;
}

/** The same synthetic run as the report sees it. */
export function syntheticReportSteps(steps: number, seed = 7, start = new Date('2025-01-01T00:00:00Z')): ReportStep[] {
  return syntheticStepRecords(steps, seed, start).map(reportStep);
}

export function syntheticEvalResults(runId: string, versions: number[], seed = 11): EvalResult[] {
  const r = mulberry32(seed);
  return versions.map((v, i) => {
    const p = versions.length > 1 ? i / (versions.length - 1) : 0;
    const pass1 = 0.1 + 0.35 * p + r() * 0.05;
    return {
      format: 'ratchet.eval/v1' as const,
      run_id: runId,
      policy_version: v,
      taskset: { name: 'heldout', path: '.ratchet/tasks/heldout.jsonl', hash: 'ab12cd34ef567890', tasks: 20 },
      k: 4,
      episodes: 80,
      pass_at: { 1: pass1, 4: Math.min(1, pass1 * 1.9) },
      reward: { mean: -0.2 + 0.9 * p + r() * 0.05, std: 0.3 },
      components: { correct_files: 0.2 + 0.5 * p },
      localization: {
        file: { precision: 0.3 + 0.4 * p, recall: 0.35 + 0.45 * p, f1: 0.32 + 0.42 * p, episodes: 80 },
        function: { precision: 0.15 + 0.3 * p, recall: 0.2 + 0.3 * p, f1: 0.17 + 0.3 * p, episodes: 80 },
      },
      per_episode: { tokens: 2600 - 400 * p, tool_calls: 6 - 2 * p },
      per_task: [],
      errors: 0,
      started_at: '2025-01-01T03:00:00Z',
      finished_at: '2025-01-01T03:05:00Z',
      episodes_per_minute: 16,
    };
  });
}
