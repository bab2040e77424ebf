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
  const seeds = [...new Set(r.arms.filter((a) => a.arm === 'rl').map((a) => a.seed))].sort((a, b) => a - b);
  const n = `${seeds.length} training seed${seeds.length === 1 ? '' : 's'}`;
  return seeds.length === o.seeds ? n : `${n} (${seeds.join(', ')}; ${o.seeds} asked)`;
}

/** Per step of a run: informative groups / groups rolled out, and the version that sampled the step. */
function signalPerStep(records: StepRecord[]): string {
  return records.map((s) => `${s.informative_groups ?? '?'}/${s.groups ?? '?'}@v${s.sampling_policy_version ?? '?'}`).join(' ');
}

export function agentSection(o: AgentLearnOptions, r: AgentLearnResult, command: string): string[] {
  const pct = (x: number) => `${(100 * x).toFixed(1)}%`;
  const ci = (c: { mean: number; lo: number; hi: number }) => `${c.mean.toFixed(3)} [${c.lo.toFixed(3)}, ${c.hi.toFixed(3)}]`;
  const eps = (arm: 'rl' | 'control', split?: 'unseen' | 'random', seed?: number) =>
    r.arms.filter((a) => a.arm === arm && (seed === undefined || a.seed === seed || (arm === 'control' && a.seed < 0)))
      .flatMap((a) => a.episodes).filter((e) => !split || e.split === split);
  const controlLabel = o.control === 'runs' ? 'control, lr 0 (SFT only)' : 'control: the warm start (SFT only)';
  const p = r.preflight;
  const losses = r.sft.heldOutLoss.map((x) => x.toFixed(3)).join(' ');
  const trainLoss = r.sft.records.map((s) => Number((s.trainer as { loss?: number }).loss ?? NaN).toFixed(3)).join(' ');
  const head = [
    '### Does it learn as an agent? SFT warm start, then multi-turn RL against the SFT-only policy (real CPU stack)',
    '',
    `Plain swe-grep tasks (the issue quotes the failing test and the exception; the file must be searched for), tool_choice "auto", ` +
      `at most ${o.maxTurns} turns, temperature ${o.temperature}, reward: ${o.rubric === 'file_f1' ? 'file F1 (a wrong answer and silence both 0)' : `rubric weights ${o.rubric}`}.`,
    `Tasks, disjoint: ${r.tasks.demo} demonstration tasks, ${r.tasks.rl} in the RL pool, held out ${r.tasks.random} random rows of the training packages (primary) ` +
      `and ${r.tasks.unseen} of ${o.heldOutPackage}, a package nothing trained on (secondary).`,
    `Warm start: the path-only procedure (find the module the failing test is named after, answer the path) ran ${r.sft.demosRan} demonstration tasks on real sandboxes; ` +
      `of the ${r.sft.demosKept} it solved, ${r.sft.demosHeldOut} were held out and the rest are the SFT data of \`${r.sft.runId}\` ` +
      `(steps of ${o.sftBatch}, lr ${o.sftLr}, stopped after ${o.sftPatience} steps without a lower held-out loss; train loss per step: ${trainLoss}; ` +
      `held-out loss per step: ${losses || 'not measured'}); the warm start is step ${r.sft.bestStep} (v${r.sft.version})${o.warmStep !== undefined ? ', chosen by --warm-step' : ''}.`,
    `Pre-flight: the warm start on ${p.episodes} RL-pool episodes passed ${p.passed} (pass rate ${p.passRate.toFixed(3)}, reward >= ${p.passReward}); ` +
      `band [${p.band[0]}, ${p.band[1]}]; ${p.informativeTasks ?? '?'} of ${p.tasks ?? '?'} tasks had samples that scored differently (need ${p.minInformative ?? '?'}): ` +
      `${p.signal ? 'signal possible' : `**no signal possible**: ${p.reason}`}.`,
  ];
  const tail = [
    '',
    `Command: \`${command}\` (source \`src/bench/learnAgentBench.ts\`).${r.wallS ? ` Wall time: ${(r.wallS / 60).toFixed(1)} min.` : ''}`,
    `Machine: ${machineLine()}.`,
  ];
  if (!p.signal && r.arms.length === 0) {
    return [...head, '', 'No RL run was trained: from this warm start nearly every group of the RL pool would score alike, so a table of ' +
      'RL against its control would be flat by construction.', ...tail];
  }
  const rows: string[] = [];
  for (const [label, split] of [['random rows of training packages (primary)', 'random'], [`unseen package (${o.heldOutPackage}, secondary)`, 'unseen'], ['all held out', undefined]] as const) {
    for (const arm of ['rl', 'control'] as const) {
      const f = armFigures(eps(arm, split));
      rows.push(`| ${label} | ${arm === 'rl' ? `RL, lr ${o.lr}` : controlLabel} | ${f.episodes} | ${ci(f.reward)} | ` +
        `${f.precision.toFixed(3)} / ${f.recall.toFixed(3)} / ${f.f1.toFixed(3)} | ${pct(f.searched)} | ${pct(f.answered)} | ${f.turns.toFixed(2)} | ${f.toolCalls.toFixed(2)} |`);
    }
  }
  const paired = (split?: 'unseen' | 'random', seed?: number) => {
    const m = (arm: 'rl' | 'control') => new Map(perTask(eps(arm, split, seed)));
    const d = pairedDifference(m('rl'), m('control'));
    return { ...d, text: `${d.mean.toFixed(3)} [${d.lo.toFixed(3)}, ${d.hi.toFixed(3)}] over ${d.tasks} tasks${d.unpaired ? ` (${d.unpaired} unpaired)` : ''}` };
  };
  const seeds = [...new Set(r.arms.filter((a) => a.arm === 'rl').map((a) => a.seed))].sort((a, b) => a - b);
  const perSeed = seeds.map((s) => ({ s, d: paired('random', s) }));
  const goal = perSeed.length >= 2 && perSeed.every(({ d }) => d.lo > 0);
  const training = trained(r).map((a) => {
    const [r0, r1] = firstAndLastQuarter(a.records.map((s) => s.mean_reward));
    const perRollout = (n: (s: StepRecord) => number) => firstAndLastQuarter(a.records.map((s) => n(s) / Math.max(1, s.rollouts))).map((x) => x.toFixed(2)).join(' → ');
    return `| ${a.arm === 'rl' ? `RL, lr ${o.lr}` : 'control, lr 0'} | ${a.seed} | \`${a.runId}\` | ${a.records.length} | ${r0.toFixed(3)} → ${r1.toFixed(3)} | ` +
      `${perRollout((s) => s.tool_calls)} | ${signalPerStep(a.records)} | ${a.records.map((s) => s.mean_reward.toFixed(2)).join(' ')} |`;
  });
  return [
    ...head,
    `Arms, for each of ${seedsRun(o, r)}: a TrainRun from the warm start (${stepsTrained(o, r)} of ${o.batch} informative groups x ${o.rollouts} rollouts, ` +
      `${o.advantage} advantages, difficulty filtering with ${o.refillRounds} refill rounds, pass-rate pools, ${o.minibatches} updates a step, lr ${o.lr}, async_level 0) ` +
      (o.control === 'runs'
        ? `and its control (same seed, tasks and sampling, lr 0: the SFT-only policy), ${o.parallelRuns} runs side by side at a time.`
        : 'and its control, the warm start itself (an lr-0 run from it trains to the same bytes; trainer/tests/test_init_adapter.py).'),
    `Held out: an EvalSweep of each arm, k=${o.k}, each episode seeded by its task and sample only, so the arms draw common random numbers ` +
      '(where the server is sent seeds: RATCHET_INFERENCE_SEED=1). Reward: mean over tasks with a bootstrap 95% interval; ' +
      'file P / R / F1: mean over episodes; searched: the share of episodes that ran a search before answering.',
    ...tail,
    '',
    '| held out | arm | episodes | reward [95% CI] | file P / R / F1 | searched | answered | turns | tool calls |',
    '| --- | --- | ---: | --- | --- | ---: | ---: | ---: | ---: |',
    ...rows,
    '',
    `Paired per-task difference on the primary split, RL − control, by training seed: ${perSeed.map(({ s, d }) => `seed ${s} ${d.text}`).join('; ')}. ` +
      `Goal (both seeds' intervals above 0): ${goal ? 'met' : 'not met'}. ` +
      `All seeds: primary ${paired('random').text}; secondary (unseen package) ${paired('unseen').text}.`,
    '',
    '| arm | seed | run | steps | reward (first → last quarter) | tool calls per episode (first → last quarter) | informative/groups@sampling version, per step | reward per step |',
    '| --- | ---: | --- | ---: | --- | --- | --- | --- |',
    ...training,
    '',
    `${o.control === 'runs' ? 'Each run\'s curves beside its seed\'s other arm (dashed)' : 'Each RL run\'s curves'}, in its HTML report under the artifacts root: ` +
      `${r.reports.map((f) => `\`${path.relative(paths.artifacts(), f)}\``).join(', ')}.`,
  ];
}
