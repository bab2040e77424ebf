/**
 * bench:learn — does a Ratchet run make the agent better? Two TrainRuns on the real
 * CPU stack, identical (config, seed, tasks) but for the learning rate: the run
 * (`--lr`) and a control with lr 0, side by side (the bench starts a second trainer
 * worker, so each run holds one). Then an EvalSweep of each at policy v0 and at its
 * final version on held-out tasks, k samples per task, with a bootstrap 95%
 * confidence interval over tasks.
 *
 * Task distribution (`--tasks traceback`, the default): swe-grep localization over
 * taskgen's bugs, each issue rewritten as the failing test's traceback
 * (src/tasks/traceback.ts). The test file and the library file each appear once, and
 * only the library file is right, so a 135M model has something it can learn (pick
 * the frame outside the tests) and a chance to stumble on it at v0 (GRPO needs reward
 * variance within a group). `--tasks plain` keeps taskgen's issues, which need a
 * search the model does not make. Fair because the control sees the same tasks,
 * seeds and sampling; only the updates differ.
 *
 * Needs `ratchet up` and the task sets (infra/tasks.sh). Writes its table into
 * BENCHMARKS.md and each run's HTML report (the other run's reward drawn beside it).
 * bench:learn's one-turn case (src/bench/learnCli.ts; the multi-turn agent case is learnAgentBench.ts):
 *   npm run bench:learn -- --case one-turn [--steps 30 --batch 1 --rollouts 4 --lr 2e-4 --eval-tasks 8 --k 4 --max-turns 1 --temperature 0.7]
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { resolveTaskset } from '../evals/tasksets';
import { StepRecord } from '../contracts';
import { isEvalResultKey, runKeys } from '../artifacts/keys';
import { LocalArtifactStore } from '../artifacts/store';
import { readStepRecords } from '../records/runRecords';
import { connectClient } from '../cli/temporal';
import { paths, TASK_QUEUES } from '../shared/paths';
import { generateReport } from '../report';
import { workerSpecs } from '../stack';
import { startService, stopService } from '../stack/processes';
import { writeTaskSubset } from '../tasks/subset';
import { tracebackVariant } from '../tasks/traceback';
import type { EvalSweepResult } from '../contracts/eval';
import type { TrainRunInput } from '../contracts';
import { machineLine } from './benchmarksFile';

export interface LearnOptions {
  steps: number;
  batch: number;
  rollouts: number;
  lr: number;
  evalTasks: number;
  k: number;
  maxTurns: number;
  fewShot: boolean;
  temperature: number;
  /** Rubric weights over swe-grep's defaults, "name=value,..." ('' for none). */
  rubric: string;
  tasks: 'traceback' | 'plain';
}

export const LEARN_DEFAULTS: LearnOptions = {
  steps: 30,
  batch: 1,
  rollouts: 4,
  lr: 2e-4,
  evalTasks: 8,
  k: 4,
  // One turn: read the traceback, answer. Keeps a 30-step run and its control near an hour on 2 CPU cores.
  maxTurns: 1,
  fewShot: true,
  // At 1.0 SmolLM2-135M's tool arguments are mostly noise; at 0.4 it copies the test path nearly every time.
  temperature: 0.7,
  // swe-grep's defaults score a wrong answer (-0.8) below no answer (-0.5), so GRPO's advantages teach a small
  // model to stop answering before it finds a right one: the first attempt's learning run went silent in 15 of
  // 28 episodes against the control's 5 (BENCHMARKS.md). Here a wrong answer (-0.25) scores above silence and
  // a right one (1.5) far above both.
  rubric: 'incorrect_files_penalty=0.25,completion_bonus=0.5',
  tasks: 'traceback',
};

/** `--name value` flags over the defaults; a bad value is an error naming the flag. */
export function parseLearnArgs(argv: string[]): LearnOptions {
  const o: LearnOptions = { ...LEARN_DEFAULTS };
  const flag = (name: string): string | undefined => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : undefined; };
  const num = (name: string, key: 'steps' | 'batch' | 'rollouts' | 'lr' | 'evalTasks' | 'k' | 'maxTurns' | 'temperature', min: number): void => {
    const v = flag(name);
    if (v === undefined) return;
    const x = Number(v);
    if (!Number.isFinite(x) || x < min) throw new Error(`--${name}: ${JSON.stringify(v)} is not a number >= ${min}`);
    o[key] = x;
  };
  num('steps', 'steps', 1); num('batch', 'batch', 1); num('rollouts', 'rollouts', 2); num('lr', 'lr', 0);
  num('eval-tasks', 'evalTasks', 1); num('k', 'k', 1); num('max-turns', 'maxTurns', 1); num('temperature', 'temperature', 0);
  const fewShot = flag('few-shot');
  if (fewShot !== undefined) {
    if (fewShot !== 'true' && fewShot !== 'false') throw new Error(`--few-shot: ${JSON.stringify(fewShot)} is not true or false`);
    o.fewShot = fewShot === 'true';
  }
  const tasks = flag('tasks');
  if (tasks !== undefined) {
    if (tasks !== 'traceback' && tasks !== 'plain') throw new Error(`--tasks: ${JSON.stringify(tasks)} is not traceback or plain`);
    o.tasks = tasks;
  }
  o.rubric = flag('rubric') ?? o.rubric;
  rubricToml(o.rubric); // validates
  return o;
}

export function rubricToml(rubric: string): string {
  if (rubric === '') return '';
  return `[env.rubric]\n${rubric.split(',').map((kv) => {
    const [k, v] = kv.split('=');
    if (!k || !/^[a-z_]+$/.test(k) || v === undefined || v === '' || !Number.isFinite(Number(v))) {
      throw new Error(`--rubric: "${kv}" is not name=number (e.g. completion_bonus=0.5)`);
    }
    return `${k} = ${Number(v)}`;
  }).join('\n')}\n`;
}

/** The run config of one side of the bench: the two differ in name and lr only. */
export function learnConfigToml(o: LearnOptions, name: string, lr: number, dataset: string): string {
  return `name = "${name}"
[trainer]
device = "cpu"
micro_batch_tokens = 4096
[trainer.ac]
freq = 1
[trainer.lora]
rank = 8
alpha = 16
[trainer.optim]
lr = ${lr}
[sampling]
temperature = ${o.temperature}
max_tokens = 96
tool_choice = "required"
[orchestrator]
batch_size = ${o.batch}
rollouts_per_example = ${o.rollouts}
seq_len = 2048
max_steps = ${o.steps}
async_level = 1
max_concurrent_rollouts = ${o.batch * o.rollouts}
seed = 0
[[env]]
id = "swe-grep"
dataset = "${dataset}"
[env.args]
max_tokens = 384
max_tool_calls = ${o.maxTurns}
max_turns = ${o.maxTurns}
few_shot = ${o.fewShot}
${rubricToml(o.rubric)}`;
}

/** Mean and a bootstrap 95% interval of the mean over per-task values (seeded: the same data gives the same interval). */
export function bootstrapCi(values: number[], draws = 2000, seed = 1): { mean: number; lo: number; hi: number } {
  const n = values.length;
  const mean = values.reduce((a, b) => a + b, 0) / Math.max(1, n);
  if (n < 2) return { mean, lo: mean, hi: mean };
  let s = seed >>> 0;
  const rand = (): number => { s = (Math.imul(s, 1664525) + 1013904223) >>> 0; return s / 2 ** 32; };
  const means: number[] = [];
  for (let d = 0; d < draws; d++) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum += values[Math.floor(rand() * n)]!;
    means.push(sum / n);
  }
  means.sort((a, b) => a - b);
  return { mean, lo: means[Math.floor(0.025 * draws)]!, hi: means[Math.ceil(0.975 * draws) - 1]! };
}

export interface EvalPoint {
  version: number;
  episodes: number;
  /** Reward mean over tasks, with a bootstrap 95% interval. */
  reward: { mean: number; lo: number; hi: number };
  /** Share of episodes whose answer named the gold file (correct_files, the gold file's recall). */
  correct: number;
  fileF1: number | null;
}
export interface RunResult { runId: string; records: StepRecord[]; evals: EvalPoint[] }
export interface LearnResult { learn: RunResult; control: RunResult; reports: string[] }

/** The run's winning step records (appended records, src/records/runRecords.ts). */
function stepRecords(runId: string): Promise<StepRecord[]> {
  return readStepRecords(new LocalArtifactStore(), runId);
}

/** EvalSweep results (runs/<run>/evals/<version>/<taskset>.json) as the bench's points, by version. */
function evalPoints(keys: string[]): EvalPoint[] {
  const store = new LocalArtifactStore();
  return keys.map((key): EvalPoint => {
    const r = JSON.parse(readFileSync(store.localPath(key), 'utf8')) as {
      policy_version: number; episodes: number; per_task: { reward_mean: number }[]; components: Record<string, number>; localization: { file: { f1: number } | null };
    };
    return {
      version: r.policy_version, episodes: r.episodes, reward: bootstrapCi(r.per_task.map((t) => t.reward_mean)),
      correct: r.components.correct_files ?? 0, fileF1: r.localization.file?.f1 ?? null,
    };
  }).sort((a, b) => a.version - b.version);
}

/** A finished run of an earlier bench run, read back from the local store (`--render`). */
export async function storedRun(runId: string): Promise<RunResult> {
  const keys = (await new LocalArtifactStore().list(runKeys.evals(runId))).filter(isEvalResultKey);
  return { runId, records: await stepRecords(runId), evals: evalPoints(keys) };
}

async function trainAndEvaluate(o: LearnOptions, dir: string, name: string, lr: number, dataset: string, evalSet: string): Promise<RunResult> {
  const { client, close } = await connectClient();
  const runId = `${name}-${Date.now().toString(36)}`;
  try {
    process.stderr.write(`${name}: run ${runId}, ${o.steps} steps of ${o.batch}x${o.rollouts} rollouts, lr ${lr}\n`);
    const configPath = path.join(dir, `${name}.toml`);
    writeFileSync(configPath, learnConfigToml(o, name, lr, dataset));
    const input: TrainRunInput = { configPath, runId };
    await client.workflow.execute('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input] });
    const records = await stepRecords(runId);
    const final = Math.max(...records.map((r) => r.policy_version));
    process.stderr.write(`${name}: EvalSweep at v0 and v${final}, ${o.evalTasks} held-out tasks x k=${o.k}\n`);
    const res = await client.workflow.execute('EvalSweep', {
      taskQueue: TASK_QUEUES.main, workflowId: `${runId}-eval`,
      args: [{ runId, versions: [0, final], taskset: evalSet, k: o.k, force: true, maxConcurrent: 4 }],
    }) as EvalSweepResult;
    const evals = evalPoints(res.evaluated.map((e) => e.key));
    return { runId, records, evals };
  } finally {
    await close();
  }
}

/**
 * Extra trainer workers for the bench's duration: a trainer serves one run at a time (its lease), and
 * the bench's runs go side by side. Returns their service names, for stopExtraTrainers.
 */
export async function startExtraTrainers(n: number): Promise<string[]> {
  const spec = workerSpecs().find((w) => w.name === 'worker-trainer');
  if (!spec) throw new Error('no worker-trainer in the stack spec (src/stack/index.ts)');
  const names = Array.from({ length: n }, (_, i) => (i === 0 ? 'worker-trainer-bench-learn' : `worker-trainer-bench-learn-${i + 1}`));
  // No metrics port (the stack's trainer holds the default one) and no liveness file (the supervisor does not own them).
  for (const name of names) await startService({ ...spec, name, args: [...spec.args, '--metrics-port', 'off'], env: { PYTHONUNBUFFERED: '1' } });
  return names;
}

export async function stopExtraTrainers(names: string[]): Promise<void> {
  for (const name of names) await stopService(name);
}

/** Each run's HTML report, with the other run's reward drawn beside its own. */
export async function writeReports(learnId: string, controlId: string): Promise<string[]> {
  return [(await generateReport(learnId, { baseline: controlId })).file, (await generateReport(controlId, { baseline: learnId })).file];
}

/** Both runs side by side on the running stack, their EvalSweeps, and each run's HTML report with the other's reward dashed. */
export async function runLearnBench(o: LearnOptions, dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-learn-'))): Promise<LearnResult> {
  const variant = o.tasks === 'traceback' ? tracebackVariant : undefined;
  const trainSet = path.join(dir, `train-${o.tasks}.jsonl`);
  writeTaskSubset(path.join(paths.tasks(), 'train.jsonl'), Number.MAX_SAFE_INTEGER, trainSet, variant);
  const evalSet = path.join(dir, `heldout-${o.tasks}-first${o.evalTasks}.jsonl`);
  const written = writeTaskSubset(resolveTaskset('heldout').file, o.evalTasks, evalSet, variant);
  if (written < o.evalTasks) throw new Error(`the heldout task set has ${written} rows; --eval-tasks asked for ${o.evalTasks}`);
  const trainers = await startExtraTrainers(1);
  let learn: RunResult;
  let control: RunResult;
  try {
    [learn, control] = await Promise.all([
      trainAndEvaluate(o, dir, 'bench-learn', o.lr, trainSet, evalSet),
      trainAndEvaluate(o, dir, 'bench-learn-control', 0, trainSet, evalSet),
    ]);
  } finally {
    await stopExtraTrainers(trainers);
  }
  return { learn, control, reports: await writeReports(learn.runId, control.runId) };
}

const mean = (xs: number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** Mean of the first and of the last quarter of a per-step series. */
export function firstAndLastQuarter(xs: number[]): [number, number] {
  const q = Math.max(1, Math.floor(xs.length / 4));
  return [mean(xs.slice(0, q)), mean(xs.slice(-q))];
}

export function learnSection(o: LearnOptions, r: LearnResult): string[] {
  const curve = (x: RunResult) => x.records.map((s) => s.mean_reward.toFixed(2)).join(' ');
  // correct_files is the recall of the gold file: 1 when the answer names it. Its step mean is the share of episodes that end correct.
  const correct = (x: RunResult) => x.records.map((s) => s.reward_components.correct_files ?? 0);
  const evalCell = (p: EvalPoint | undefined) => (p ? `${p.reward.mean.toFixed(3)} [${p.reward.lo.toFixed(3)}, ${p.reward.hi.toFixed(3)}]; ${(100 * p.correct).toFixed(1)}% correct` : 'n/a');
  const row = (name: string, x: RunResult) => {
    const [c0, c1] = firstAndLastQuarter(correct(x));
    const [r0, r1] = firstAndLastQuarter(x.records.map((s) => s.mean_reward));
    return `| ${name} | \`${x.runId}\` | ${x.records.length} | ${r0.toFixed(3)} → ${r1.toFixed(3)} | ${(100 * c0).toFixed(1)}% → ${(100 * c1).toFixed(1)}% | ` +
      `${evalCell(x.evals[0])} | ${evalCell(x.evals[x.evals.length - 1])} |`;
  };
  return [
    '### Does it learn? A run against an lr-0 control (real CPU stack)',
    '',
    `Two TrainRuns of ${o.steps} steps side by side, ${o.batch} swe-grep task(s) (${o.tasks} issues) x ${o.rollouts} rollouts a step, ` +
      `same config, seed and tasks; lr ${o.lr} vs 0. Episodes of at most ${o.maxTurns} turn(s), few-shot ${o.fewShot}, temperature ${o.temperature}; ` +
      `rubric weights over swe-grep's defaults: ${o.rubric || 'none'}.`,
    `EvalSweep of each at v0 and its final version on the first ${o.evalTasks} held-out tasks (same variant), k=${o.k}: reward mean over tasks`,
    'with a bootstrap 95% interval, and the share of episodes whose answer names the gold file. Training columns: mean of the first and the last quarter of the steps.',
    '',
    `Command: \`npm run bench:learn -- --case one-turn --steps ${o.steps} --batch ${o.batch} --rollouts ${o.rollouts} --lr ${o.lr} --eval-tasks ${o.evalTasks} --k ${o.k} ` +
      `--max-turns ${o.maxTurns} --few-shot ${o.fewShot} --temperature ${o.temperature} --tasks ${o.tasks} --rubric ${o.rubric}\` (source \`src/bench/learn.ts\`).`,
    `Machine: ${machineLine()}.`,
    '',
    '| run | id | steps | reward (first → last quarter) | correct file (first → last quarter) | eval v0 [95% CI] | eval final [95% CI] |',
    '| --- | --- | ---: | --- | --- | --- | --- |',
    row(`lr ${o.lr}`, r.learn),
    row('control, lr 0', r.control),
    '',
    `Reward per step, lr ${o.lr}: ${curve(r.learn)}`,
    '',
    `Reward per step, control: ${curve(r.control)}`,
    '',
    `Both curves are in each run's HTML report (the other run dashed): ${r.reports.map((f) => `\`${path.relative(paths.artifacts(), f)}\``).join(', ')} ` +
      `under the artifacts root, or \`ratchet report ${r.learn.runId} --baseline ${r.control.runId}\`.`,
  ];
}
