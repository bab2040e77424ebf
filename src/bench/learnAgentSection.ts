/**
 * bench:learn's agent case, its table for BENCHMARKS.md: per held-out split and arm the reward (bootstrap
 * 95% interval over tasks), file precision / recall / F1, the share of episodes that searched before
 * answering, turns and tool calls; the paired per-task difference RL − control; a training row per run.
 * Pure: everything comes from an AgentLearnResult (src/bench/learnAgentBench.ts).
 */
import * as path from 'node:path';
import { paths } from '../shared/paths';
import { machineLine } from './benchmarksFile';
import { bootstrapCi, firstAndLastQuarter } from './learn';
import { pairedDifference } from './learnAgent';
import type { StepRecord } from '../contracts';
import type { AgentEpisode, AgentLearnOptions, AgentLearnResult } from './learnAgentBench';

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** The held-out figures of a set of episodes (one arm, all its seeds). */
export function armFigures(eps: AgentEpisode[]) {
  const answered = eps.filter((e) => e.behaviour.answered);
  return {
    episodes: eps.length,
    reward: bootstrapCi(perTask(eps).map(([, rs]) => mean(rs))),
    precision: mean(eps.map((e) => e.precision)), recall: mean(eps.map((e) => e.recall)), f1: mean(eps.map((e) => e.f1)),
    searched: mean(eps.map((e) => (e.behaviour.searchedBeforeAnswer ? 1 : 0))),
    answered: answered.length / Math.max(1, eps.length),
    turns: mean(eps.map((e) => e.behaviour.turns)), toolCalls: mean(eps.map((e) => e.behaviour.toolCalls)),
  };
}

function perTask(eps: AgentEpisode[]): [string, number[]][] {
  const m = new Map<string, number[]>();
  for (const e of eps) m.set(e.task, [...(m.get(e.task) ?? []), e.reward]);
  return [...m.entries()];
}

/** The arms that trained: every RL run, and the lr-0 control runs where the control is not the warm start itself. */
const trained = (r: AgentLearnResult) => r.arms.filter((a) => a.records.length > 0);

/** "4 steps", or, where a run was stopped early (`ratchet stop`), how many each trained of max_steps. */
function stepsTrained(o: AgentLearnOptions, r: AgentLearnResult): string {
  const counts = [...new Set(trained(r).map((a) => a.records.length))];
  const steps = (n: number) => `${n} step${n === 1 ? '' : 's'}`;
  if (counts.length === 1 && counts[0] === o.steps) return steps(o.steps);
  return `${counts.map(steps).join(' or ')}, stopped early with \`ratchet stop\` (max_steps ${o.steps}),`;
}

/** "2 training seeds", or, where fewer ran than asked (a bench rendered from the runs there are), which. */
function seedsRun(o: AgentLearnOptions, r: AgentLearnResult): string {
  const seeds = [...new Set(r.arms.map((a) => a.seed))].sort((a, b) => a - b);
  const n = `${seeds.length} training seed${seeds.length === 1 ? '' : 's'}`;
  return seeds.length === o.seeds ? n : `${n} (${seeds.join(', ')}; ${o.seeds} asked)`;
}

export function agentSection(o: AgentLearnOptions, r: AgentLearnResult, command: string): string[] {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const ci = (c: { mean: number; lo: number; hi: number }) => `${c.mean.toFixed(3)} [${c.lo.toFixed(3)}, ${c.hi.toFixed(3)}]`;
  const eps = (arm: 'rl' | 'control', split?: 'unseen' | 'random') =>
    r.arms.filter((a) => a.arm === arm).flatMap((a) => a.episodes).filter((e) => !split || e.split === split);
  const controlLabel = o.control === 'runs' ? 'control, lr 0 (SFT only)' : 'control: the warm start (SFT only)';
  const rows: string[] = [];
  for (const [label, split] of [['all held out', undefined], [`unseen package (${o.heldOutPackage})`, 'unseen'], ['random rows of training packages', 'random']] as const) {
    for (const arm of ['rl', 'control'] as const) {
      const f = armFigures(eps(arm, split));
      rows.push(`| ${label} | ${arm === 'rl' ? `RL, lr ${o.lr}` : controlLabel} | ${f.episodes} | ${ci(f.reward)} | ` +
        `${f.precision.toFixed(3)} / ${f.recall.toFixed(3)} / ${f.f1.toFixed(3)} | ${pct(f.searched)} | ${pct(f.answered)} | ${f.turns.toFixed(2)} | ${f.toolCalls.toFixed(2)} |`);
    }
  }
  const paired = (split?: 'unseen' | 'random') => {
    const m = (arm: 'rl' | 'control') => new Map(perTask(eps(arm, split)));
    const d = pairedDifference(m('rl'), m('control'));
    return `${d.mean.toFixed(3)} [${d.lo.toFixed(3)}, ${d.hi.toFixed(3)}] over ${d.tasks} tasks${d.unpaired ? ` (${d.unpaired} unpaired)` : ''}`;
  };
  const training = trained(r).map((a) => {
    const [r0, r1] = firstAndLastQuarter(a.records.map((s) => s.mean_reward));
    const perRollout = (n: (s: StepRecord) => number) => firstAndLastQuarter(a.records.map((s) => n(s) / Math.max(1, s.rollouts))).map((x) => x.toFixed(2)).join(' → ');
    return `| ${a.arm === 'rl' ? `RL, lr ${o.lr}` : 'control, lr 0'} | ${a.seed} | \`${a.runId}\` | ${a.records.length} | ${r0.toFixed(3)} → ${r1.toFixed(3)} | ` +
      `${perRollout((s) => s.tool_calls)} | ${perRollout((s) => s.samples)} | ${a.records.map((s) => s.mean_reward.toFixed(2)).join(' ')} |`;
  });
  const sftLoss = r.sft.records.map((s) => Number((s.trainer as { loss?: number }).loss ?? NaN).toFixed(3)).join(' ');
  return [
    '### Does it learn as an agent? SFT warm start, then multi-turn RL against the SFT-only policy (real CPU stack)',
    '',
    `Plain swe-grep tasks (the issue quotes the failing test and the exception; the file must be searched for), tool_choice "auto", ` +
      `at most ${o.maxTurns} turns, temperature ${o.temperature}, rubric weights over swe-grep's defaults: ${o.rubric || 'none'}.`,
    `Warm start: the scripted solver ran ${r.sft.demosRan} training tasks on real sandboxes; the ${r.sft.demosKept} it solved (reward >= 1) are the SFT data ` +
      `of \`${r.sft.runId}\` (${o.sftSteps} steps of ${o.sftBatch}, lr ${o.sftLr}; loss per step: ${sftLoss}).`,
    `Arms, for each of ${seedsRun(o, r)}: a TrainRun from that adapter (${stepsTrained(o, r)} of ${o.batch} tasks x ${o.rollouts} rollouts, lr ${o.lr}) ` +
      (o.control === 'runs'
        ? `and its control (same seed, tasks and sampling, lr 0: the SFT-only policy), ${o.parallelRuns} runs side by side at a time, a seed's two arms together.`
        : `and its control, the SFT-only policy: the warm start's own final version (an lr-0 run from it trains to the same bytes; ` +
          `trainer/tests/test_init_adapter.py), ${o.k} eval sample${o.k === 1 ? '' : 's'} a task for each seed; ${o.parallelRuns} TrainRun${o.parallelRuns === 1 ? '' : 's'} at a time.`),
    `Held out: ${r.evalTasks.unseen} tasks of ${o.heldOutPackage}, a package no demonstration or training task came from, and ${r.evalTasks.random} random rows ` +
      `of the training packages; an EvalSweep of each run's final version, k=${o.k}. Reward: mean over tasks with a bootstrap 95% interval; ` +
      'file P / R / F1: the rubric\'s components, mean over episodes; searched: the share of episodes that ran a search before answering.',
    '',
    `Command: \`${command}\` (source \`src/bench/learnAgentBench.ts\`).${r.wallS ? ` Wall time: ${(r.wallS / 60).toFixed(1)} min.` : ''}`,
    `Machine: ${machineLine()}.`,
    '',
    '| held out | arm | episodes | reward [95% CI] | file P / R / F1 | searched | answered | turns | tool calls |',
    '| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    `Paired per-task difference, RL − control (each task's mean over seeds and samples): all held out ${paired()}; ` +
      `unseen package ${paired('unseen')}; random rows ${paired('random')}.`,
    '',
    '| arm | seed | run | steps | reward (first → last quarter) | tool calls per episode (first → last quarter) | trainer samples per episode (first → last quarter) | reward per step |',
    '| --- | ---: | --- | ---: | --- | --- | --- | --- |',
    ...training,
    '',
    `${o.control === 'runs' ? 'Each run\'s curves beside its seed\'s other arm (dashed)' : 'Each RL run\'s curves'}, in its HTML report under the artifacts root: ` +
      `${r.reports.map((f) => `\`${path.relative(paths.artifacts(), f)}\``).join(', ')}.`,
  ];
}
