/**
 * bench:learn's multi-turn case (issue 28): does RL teach an agent past its warm start?
 *
 * 1. Tasks: plain swe-grep tasks, whose answer needs a search (the issue quotes the failing
 *    test and the exception, never the file), tool_choice "auto", up to `maxTurns` turns.
 *    train.jsonl and heldout.jsonl are pooled and split (learnAgent.heldOutSplit): every
 *    task of one package is held out (no demonstration or training task came from it), and
 *    so are random rows of the training packages.
 * 2. Warm start: the scripted solver's demonstrations on training tasks (real sandboxes, kept
 *    by reward; src/sft/demos.ts), then an SftRun on them.
 * 3. Arms, for each training seed: an RL TrainRun from the SFT adapter ([model] init_from) and
 *    its control, the SFT-only policy (what an lr-0 run from it trains to, byte for byte:
 *    trainer/tests/test_init_adapter.py). By default the control is the warm start's own final
 *    version, evaluated with k samples a task for each seed; `--control runs` runs the lr-0
 *    TrainRuns instead (same seeds, tasks and sampling), at twice the trainer time.
 * 4. An EvalSweep of each run's final version on the held-out tasks, k samples a task. The
 *    figures (src/bench/learnAgentSection.ts) come from the episodes' trajectories: reward, file precision / recall / F1 (the
 *    rubric's own components), the share that searched before answering, turns and tool calls;
 *    and the paired per-task difference RL − control with a bootstrap 95% interval.
 *
 *   npm run bench:learn [-- --seeds 2 --steps 2 --demos 64 --sft-steps 12 --eval-unseen 6 --eval-random 6 --k 1]
 *   npm run bench:learn -- --case one-turn ...   (the one-turn traceback case, src/bench/learn.ts)
 */
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';
import type { Client } from '@temporalio/client';
import { connectClient } from '../cli/temporal';
import { LocalArtifactStore } from '../artifacts/store';
import { readStepRecords } from '../records/runRecords';
import { generateReport } from '../report';
import { SandboxManager } from '../sandbox/manager';
import { makeDemonstrations } from '../sft/demos';
import { paths, TASK_QUEUES } from '../shared/paths';
import { loadTasks } from '../tasks/load';
import { readTaskRows, writeTaskRows } from '../tasks/subset';
import { Trajectory } from '../contracts/trajectory';
import type { StepRecord, TrainRunInput } from '../contracts';
import { rubricToml, startExtraTrainers, stopExtraTrainers, writeReports } from './learn';
import { episodeBehaviour, heldOutSplit, shuffled, type EpisodeBehaviour } from './learnAgent';

export interface AgentLearnOptions {
  /** Training seeds per arm ([orchestrator] seed 0..seeds-1): the task order and the sampling seeds. */
  seeds: number;
  steps: number;
  batch: number;
  rollouts: number;
  lr: number;
  maxTurns: number;
  temperature: number;
  rubric: string;
  /** Training tasks the scripted solver runs; those it solves (reward >= 1) are the SFT data. */
  demos: number;
  sftSteps: number;
  sftBatch: number;
  sftLr: number;
  /** The package every task of which is held out. */
  heldOutPackage: string;
  /** Held-out tasks evaluated: from the unseen package, and random rows of the training packages. */
  evalUnseen: number;
  evalRandom: number;
  k: number;
  /**
   * Runs at a time (a trainer worker each), in waves by seed: each trainer holds ~8 GiB on CPU at these
   * sequence lengths, and four beside vLLM ran a 24 GiB machine out of memory (vLLM was OOM-killed).
   */
  parallelRuns: number;
  /**
   * The control arm: "warm-start" evaluates the SFT adapter itself (k samples a task a seed), "runs" trains an
   * lr-0 TrainRun a seed from it and evaluates that; the adapters are the same bytes, the runs cost trainer time.
   */
  control: 'warm-start' | 'runs';
  /** Reuse a finished SftRun of an earlier bench run (its demonstrations and warm start) instead of making them again. */
  sftRun?: string;
}

// Sized for ~75 minutes on this 2-core, 24 GiB machine (BENCHMARKS.md). One process at a time on the CPU:
// the first attempt ran two trainers beside vLLM and a trainer step of 16 episodes took 20 minutes (19 tokens/s),
// while the SftRun alone trained ~150 tokens/s. Since the demonstrations write tool calls as the server gives
// them back (src/sft/solvers/toolCall.ts), an episode trains as one sample, not one per turn (about half the tokens).
export const AGENT_DEFAULTS: AgentLearnOptions = {
  seeds: 2,
  steps: 3,
  // Three groups a step: one group of four alike (all right or all wrong) leaves the others' advantage.
  batch: 3,
  rollouts: 4,
  // Higher than the one-turn case's 2e-4 over 30 steps: 3 steps must show a move if there is one.
  lr: 1e-3,
  // The demonstrations take 3 (read the test, search, answer); one spare.
  maxTurns: 4,
  temperature: 0.7,
  // As the one-turn case: a wrong answer (-0.25) above silence (-0.5), a right one (1.5) far above.
  rubric: 'incorrect_files_penalty=0.25,completion_bonus=0.5',
  // The solver solves ~4 in 5. The first warm start (12 steps of 8 over 52 demonstrations, ~2 epochs, loss
  // 0.03) memorized them and solved no unseen task; this one sees ~75 tasks about once (10 steps of 8).
  demos: 96,
  sftSteps: 10,
  sftBatch: 8,
  sftLr: 3e-3,
  // The smallest package of the task sets (inflection: 23 tasks): the training packages keep the most rows.
  heldOutPackage: 'inflection',
  evalUnseen: 6,
  evalRandom: 6,
  k: 1,
  parallelRuns: 1,
  control: 'warm-start',
};

type NumKey = Exclude<keyof AgentLearnOptions, 'rubric' | 'heldOutPackage' | 'sftRun' | 'control'>;
const FLAGS: Record<string, { key: NumKey; min: number }> = {
  seeds: { key: 'seeds', min: 1 }, steps: { key: 'steps', min: 1 }, batch: { key: 'batch', min: 1 }, rollouts: { key: 'rollouts', min: 2 },
  lr: { key: 'lr', min: 0 }, 'max-turns': { key: 'maxTurns', min: 3 }, temperature: { key: 'temperature', min: 0 },
  demos: { key: 'demos', min: 1 }, 'sft-steps': { key: 'sftSteps', min: 1 }, 'sft-batch': { key: 'sftBatch', min: 1 }, 'sft-lr': { key: 'sftLr', min: 0 },
  'eval-unseen': { key: 'evalUnseen', min: 1 }, 'eval-random': { key: 'evalRandom', min: 0 }, k: { key: 'k', min: 1 },
  'parallel-runs': { key: 'parallelRuns', min: 1 },
};

/** `--name value` flags over the defaults; a bad value is an error naming the flag. */
export function parseAgentArgs(argv: string[]): AgentLearnOptions {
  const o: AgentLearnOptions = { ...AGENT_DEFAULTS };
  const flag = (name: string): string | undefined => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : undefined; };
  for (const [name, { key, min }] of Object.entries(FLAGS)) {
    const v = flag(name);
    if (v === undefined) continue;
    const x = Number(v);
    if (!Number.isFinite(x) || x < min) throw new Error(`--${name}: ${JSON.stringify(v)} is not a number >= ${min}`);
    o[key] = x;
  }
  o.rubric = flag('rubric') ?? o.rubric;
  rubricToml(o.rubric); // validates
  o.heldOutPackage = flag('held-out-package') ?? o.heldOutPackage;
  const control = flag('control') ?? o.control;
  if (control !== 'warm-start' && control !== 'runs') throw new Error(`--control: ${JSON.stringify(control)} is not warm-start or runs`);
  o.control = control;
  const sftRun = flag('sft-run');
  if (sftRun !== undefined) o.sftRun = sftRun;
  return o;
}

const envArgs = (o: AgentLearnOptions) => ({ max_tokens: 128 * o.maxTurns, max_tool_calls: o.maxTurns, max_turns: o.maxTurns });

// micro_batch_tokens 2048: the CPU trainer's peak (the vocabulary's logits of a micro-batch dominate it)
// stays low enough for two trainers beside vLLM on 24 GiB.
const TRAINER = `[trainer]
device = "cpu"
micro_batch_tokens = 2048
[trainer.ac]
freq = 1
[trainer.lora]
rank = 8
alpha = 16`;

/**
 * How episodes are sampled, bounded and scored: the same in every run of the bench, the SftRun included,
 * since an EvalSweep of a run's version uses its run's config (the warm start's own sweep is the control).
 */
function episodeToml(o: AgentLearnOptions, dataset: string): string {
  const ea = envArgs(o);
  return `[sampling]
temperature = ${o.temperature}
max_tokens = 128
tool_choice = "auto"
[[env]]
id = "swe-grep"
dataset = "${dataset}"
[env.args]
max_tokens = ${ea.max_tokens}
max_tool_calls = ${ea.max_tool_calls}
max_turns = ${ea.max_turns}
few_shot = false
${rubricToml(o.rubric)}`;
}

/** The SftRun's config: the demonstrations, `sftSteps` steps of `sftBatch`; its episodes' settings are the arms'. */
export function agentSftConfigToml(o: AgentLearnOptions, p: { name: string; data: string; dataset: string }): string {
  return `name = "${p.name}"
${TRAINER}
[trainer.optim]
lr = ${o.sftLr}
[trainer.loss]
normalization = "token"
[orchestrator]
seq_len = 2048
max_steps = ${o.sftSteps}
seed = 0
[sft]
data = [${JSON.stringify(p.data)}]
batch_size = ${o.sftBatch}
${episodeToml(o, p.dataset)}`;
}

/** One arm's run config: the two arms of a seed differ in name and lr only. */
export function agentRunConfigToml(o: AgentLearnOptions, p: { name: string; lr: number; seed: number; dataset: string; initFrom: string }): string {
  return `name = "${p.name}"
[model]
init_from = "${p.initFrom}"
${TRAINER}
[trainer.optim]
lr = ${p.lr}
[orchestrator]
batch_size = ${o.batch}
rollouts_per_example = ${o.rollouts}
seq_len = 2048
max_steps = ${o.steps}
async_level = 1
max_concurrent_rollouts = ${o.batch * o.rollouts}
seed = ${p.seed}
${episodeToml(o, p.dataset)}`;
}

/** One held-out episode, as the bench reads it from its trajectory. */
export interface AgentEpisode {
  task: string;
  /** The sample's index in its EvalSweep (0..k-1 a task). */
  sample: number;
  split: 'unseen' | 'random';
  reward: number;
  precision: number;
  recall: number;
  f1: number;
  behaviour: EpisodeBehaviour;
}

export interface ArmRun {
  arm: 'rl' | 'control';
  seed: number;
  runId: string;
  records: StepRecord[];
  finalVersion: number;
  episodes: AgentEpisode[];
}

export interface AgentLearnResult {
  sft: { runId: string; demosRan: number; demosKept: number; records: StepRecord[] };
  arms: ArmRun[];
  evalTasks: { unseen: number; random: number };
  /** Each run's HTML report, its seed's other arm drawn beside it. */
  reports: string[];
  wallS: number;
}

/**
 * A version's eval episodes from runs/<run>/evals/trajectories/eval-v<version>-<task>/: for each
 * sample index the newest file (a retried episode leaves its earlier attempt's file beside it).
 */
export function readEvalEpisodes(runId: string, version: number, splitOf: ReadonlyMap<string, 'unseen' | 'random'>, samples: number): AgentEpisode[] {
  const root = path.join(paths.artifacts(), 'runs', runId, 'evals', 'trajectories');
  const prefix = `eval-v${version}-`;
  const out: AgentEpisode[] = [];
  for (const group of readdirSync(root).filter((g) => g.startsWith(prefix))) {
    const task = group.slice(prefix.length);
    const split = splitOf.get(task);
    if (!split) continue;
    const newest = new Map<string, { file: string; mtime: number }>();
    for (const f of readdirSync(path.join(root, group)).filter((x) => x.endsWith('.json'))) {
      const sample = f.split(/[-.]/)[0]!;
      // An earlier sweep of the same version with a larger k leaves samples past this one's.
      if (!(Number(sample) < samples)) continue;
      const mtime = statSync(path.join(root, group, f)).mtimeMs;
      if ((newest.get(sample)?.mtime ?? -1) < mtime) newest.set(sample, { file: f, mtime });
    }
    for (const [sample, { file }] of newest) {
      const t = Trajectory.parse(JSON.parse(readFileSync(path.join(root, group, file), 'utf8')));
      const c = t.reward?.components ?? {};
      out.push({
        task, sample: Number(sample), split, reward: t.reward?.total ?? 0,
        precision: c.file_precision ?? 0, recall: c.file_recall ?? 0, f1: c.file_f1 ?? 0, behaviour: episodeBehaviour(t),
      });
    }
  }
  return out;
}

const log = (msg: string) => process.stderr.write(`[bench:learn agent ${new Date().toISOString().slice(11, 19)}] ${msg}\n`);

/** How many demonstrations a bench SftRun's data came from, kept beside the bench's results (`--sft-run` reads it). */
const demosFile = (sftRunId: string) => path.join(paths.artifacts(), 'bench', `learn-agent-demos-${sftRunId}.json`);

/** The warm start: the scripted solver's demonstrations on training tasks only, then an SftRun on those it solved. */
export async function warmStart(o: AgentLearnOptions, p: { dir: string; trainFile: string; runId: string; client: Client }): Promise<string> {
  const trainTasks = (await loadTasks(p.trainFile, { onInvalid: 'skip' })).tasks;
  const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
  const demos = await makeDemonstrations({
    envId: 'swe-grep', tasks: shuffled(trainTasks, 3).slice(0, o.demos), taskSetDir: p.dir, sandboxes, minReward: 1, envArgs: envArgs(o), concurrency: 2,
  }).finally(() => sandboxes.close());
  if (demos.kept.length === 0) throw new Error(`none of ${demos.all.length} demonstrations reached reward 1: no SFT data`);
  const data = path.join(p.dir, 'demos.jsonl');
  writeFileSync(data, demos.kept.map((t) => JSON.stringify(t)).join('\n') + '\n');
  mkdirSync(path.dirname(demosFile(p.runId)), { recursive: true });
  writeFileSync(demosFile(p.runId), JSON.stringify({ ran: demos.all.length, kept: demos.kept.length }));
  log(`demonstrations: ${demos.kept.length} of ${demos.all.length} kept -> ${data}`);
  const config = path.join(p.dir, 'sft.toml');
  writeFileSync(config, agentSftConfigToml(o, { name: 'bench-agent-sft', data, dataset: p.trainFile }));
  log(`SftRun ${p.runId}: ${o.sftSteps} steps of ${o.sftBatch}, lr ${o.sftLr}`);
  await p.client.workflow.execute('SftRun', { taskQueue: TASK_QUEUES.main, workflowId: p.runId, args: [{ configPath: config, runId: p.runId } satisfies TrainRunInput] });
  return p.runId;
}

/** The bench's task files and held-out split (seeded: the same options give the same split). */
export function benchTasks(o: AgentLearnOptions, dir: string) {
  const pool = [path.join(paths.tasks(), 'train.jsonl'), path.join(paths.tasks(), 'heldout.jsonl')]
    .flatMap((f) => readTaskRows(f)) as (Record<string, unknown> & { repo: string; instance_id: string })[];
  const split = heldOutSplit(pool, o.heldOutPackage, o.evalRandom, 1);
  const unseen = shuffled(split.unseenPackage, 2).slice(0, o.evalUnseen);
  const trainFile = path.join(dir, 'train-plain.jsonl');
  const evalFile = path.join(dir, 'heldout-plain.jsonl');
  writeTaskRows(split.train, trainFile);
  writeTaskRows([...unseen, ...split.randomRows], evalFile);
  const splitOf = new Map<string, 'unseen' | 'random'>([
    ...unseen.map((t) => [t.instance_id, 'unseen'] as const), ...split.randomRows.map((t) => [t.instance_id, 'random'] as const),
  ]);
  log(`tasks: ${split.train.length} train (${[...new Set(split.train.map((t) => t.repo))].join(', ')}), held out ${unseen.length} of ${o.heldOutPackage} + ${split.randomRows.length} random rows`);
  return { trainFile, evalFile, splitOf, evalTasks: { unseen: unseen.length, random: split.randomRows.length } };
}

/**
 * A bench result read back from finished runs (`--render-agent-runs`): the SftRun and the arms' runs, named
 * bench-agent-<rl|control>-s<seed>-..., each with its EvalSweep of its final version already recorded; with
 * `--control warm-start`, the SftRun's own EvalSweep of its final version is the control.
 */
export async function storedAgentResult(o: AgentLearnOptions, sftId: string, runIds: string[], dir: string): Promise<AgentLearnResult> {
  const { splitOf, evalTasks } = benchTasks(o, dir);
  const arms = await Promise.all(runIds.map(async (runId): Promise<ArmRun> => {
    const m = /^bench-agent-(rl|control)-s(\d+)-/.exec(runId);
    if (!m) throw new Error(`${runId}: not a bench:learn agent run (bench-agent-<rl|control>-s<seed>-...)`);
    return armResult(m[1] as 'rl' | 'control', Number(m[2]), runId, await readStepRecords(new LocalArtifactStore(), runId), splitOf, o.k);
  }));
  const sft = await sftResult(sftId);
  if (o.control === 'warm-start') arms.push(...warmStartControls(o, sft, splitOf, [...new Set(arms.map((a) => a.seed))]));
  return { sft, arms, evalTasks, reports: await armReports(arms), wallS: 0 };
}

const finalVersionOf = (records: StepRecord[]): number => Math.max(...records.map((r) => r.policy_version));

/** A finished arm's run: its step records and its final version's held-out episodes (`k` a task). */
function armResult(arm: 'rl' | 'control', seed: number, runId: string, records: StepRecord[], splitOf: ReadonlyMap<string, 'unseen' | 'random'>, k: number): ArmRun {
  const finalVersion = finalVersionOf(records);
  return { arm, seed, runId, records, finalVersion, episodes: readEvalEpisodes(runId, finalVersion, splitOf, k) };
}

/**
 * The control arm of each seed, from the warm start's own EvalSweep of k x seeds samples a task: seed s
 * takes samples s*k .. s*k+k-1. No records: the control trains nothing.
 */
function warmStartControls(o: AgentLearnOptions, sft: AgentLearnResult['sft'], splitOf: ReadonlyMap<string, 'unseen' | 'random'>, seeds: number[]): ArmRun[] {
  const finalVersion = finalVersionOf(sft.records);
  const episodes = readEvalEpisodes(sft.runId, finalVersion, splitOf, o.k * o.seeds);
  return seeds.map((seed) => ({
    arm: 'control', seed, runId: sft.runId, records: [], finalVersion,
    episodes: episodes.filter((e) => Math.floor(e.sample / o.k) === seed),
  }));
}

/** The warm start, read back: its step records and how many demonstrations its data came from. */
async function sftResult(sftId: string): Promise<AgentLearnResult['sft']> {
  const demos = JSON.parse(readFileSync(demosFile(sftId), 'utf8')) as { ran: number; kept: number };
  return { runId: sftId, demosRan: demos.ran, demosKept: demos.kept, records: await readStepRecords(new LocalArtifactStore(), sftId) };
}

/**
 * Each RL run's HTML report: with an lr-0 control run, the pair, each with the other's curves beside its own;
 * with the warm start as the control, the RL run's own (the SftRun's curves are losses, not rewards).
 */
async function armReports(arms: ArmRun[]): Promise<string[]> {
  const reports: string[] = [];
  for (const rl of arms.filter((a) => a.arm === 'rl')) {
    const control = arms.find((a) => a.arm === 'control' && a.seed === rl.seed && a.records.length > 0);
    if (control) reports.push(...(await writeReports(rl.runId, control.runId)));
    else reports.push((await generateReport(rl.runId)).file);
  }
  return reports;
}

/** An EvalSweep of one version of a run on the held-out tasks. */
async function evaluate(client: Client, o: { runId: string; version: number; evalFile: string; k: number; workflowId: string }): Promise<void> {
  await client.workflow.execute('EvalSweep', {
    taskQueue: TASK_QUEUES.main, workflowId: o.workflowId,
    args: [{ runId: o.runId, versions: [o.version], taskset: o.evalFile, k: o.k, force: true, maxConcurrent: 2 }],
  });
}

/** The whole multi-turn bench on the running stack (see the file comment). */
export async function runAgentBench(o: AgentLearnOptions, dir: string): Promise<AgentLearnResult> {
  const t0 = Date.now();
  const stamp = Date.now().toString(36);
  const { trainFile, evalFile, splitOf, evalTasks } = benchTasks(o, dir);
  const seeds = Array.from({ length: o.seeds }, (_, seed) => seed);
  const arms = seeds.flatMap((seed) => [
    { arm: 'rl' as const, seed, lr: o.lr }, ...(o.control === 'runs' ? [{ arm: 'control' as const, seed, lr: 0 }] : []),
  ]);

  const { client, close } = await connectClient();
  const trainers = await startExtraTrainers(Math.min(o.parallelRuns, arms.length) - 1);
  try {
    const sftId = o.sftRun ?? await warmStart(o, { dir, trainFile, runId: `bench-agent-sft-${stamp}`, client });
    const sft = await sftResult(sftId);
    if (o.control === 'warm-start') {
      // The control first: the warm start alone on the machine, and its figures are there if a run fails later.
      const version = finalVersionOf(sft.records);
      log(`control: EvalSweep of the warm start ${sftId} v${version} on ${splitOf.size} held-out tasks x k=${o.k * o.seeds} (${o.k} a seed)`);
      await evaluate(client, { runId: sftId, version, evalFile, k: o.k * o.seeds, workflowId: `${sftId}-eval-${stamp}` });
    }

    log(`${arms.length} TrainRuns, ${o.parallelRuns} at a time, from ${sftId}: ${o.steps} steps of ${o.batch}x${o.rollouts}, lr ${o.lr}` +
      `${o.control === 'runs' ? ' vs 0' : ''}, seeds 0..${o.seeds - 1}`);
    const runArm = async (a: (typeof arms)[number]): Promise<ArmRun> => {
      const name = `bench-agent-${a.arm}-s${a.seed}`;
      const runId = `${name}-${stamp}`;
      const configPath = path.join(dir, `${name}.toml`);
      writeFileSync(configPath, agentRunConfigToml(o, { name, lr: a.lr, seed: a.seed, dataset: trainFile, initFrom: sftId }));
      await client.workflow.execute('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [{ configPath, runId } satisfies TrainRunInput] });
      const records = await readStepRecords(new LocalArtifactStore(), runId);
      const finalVersion = finalVersionOf(records);
      log(`${runId}: trained to v${finalVersion}; EvalSweep of v${finalVersion} on ${splitOf.size} held-out tasks x k=${o.k}`);
      await evaluate(client, { runId, version: finalVersion, evalFile, k: o.k, workflowId: `${runId}-eval` });
      return armResult(a.arm, a.seed, runId, records, splitOf, o.k);
    };
    // Waves of parallelRuns runs; with lr-0 control runs, a seed's two arms go in the same wave (the same machine load).
    const runs: ArmRun[] = [];
    for (let i = 0; i < arms.length; i += o.parallelRuns) runs.push(...(await Promise.all(arms.slice(i, i + o.parallelRuns).map(runArm))));
    if (o.control === 'warm-start') runs.push(...warmStartControls(o, sft, splitOf, seeds));
    return { sft, arms: runs, evalTasks, reports: await armReports(runs), wallS: Math.round((Date.now() - t0) / 1000) };
  } finally {
    await stopExtraTrainers(trainers);
    await close();
  }
}
