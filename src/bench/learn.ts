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
 *   npm run bench:learn [-- --steps 30 --batch 1 --rollouts 4 --lr 2e-4 --eval-tasks 8 --k 4 --max-turns 1 --temperature 0.7]
 */
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { resolveTaskset } from '../activities/eval';
import type { StepRecord } from '../activities/metrics';
import { LocalArtifactStore } from '../artifacts/store';
import { connectClient } from '../cli/temporal';
import { paths, TASK_QUEUES } from '../shared/paths';
import { generateReport } from '../report';
import { workerSpecs } from '../stack';
import { startService, stopService } from '../stack/processes';
import { writeTaskSubset } from '../tasks/subset';
import { tracebackVariant } from '../tasks/traceback';
import type { EvalSweepResult } from '../workflows/evalSweep';
import type { TrainRunInput } from '../workflows/types';
import { machineLine, writeBenchSection } from './benchmarksFile';

const arg = (name: string, fallback: string): string => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1]! : fallback;
};
const STEPS = Number(arg('steps', '30'));
const BATCH = Number(arg('batch', '1'));
const ROLLOUTS = Number(arg('rollouts', '4'));
const LR = Number(arg('lr', '2e-4'));
const EVAL_TASKS = Number(arg('eval-tasks', '8'));
const K = Number(arg('k', '4'));
const MAX_TURNS = Number(arg('max-turns', '1'));
const FEW_SHOT = arg('few-shot', 'true') === 'true';
// 0.7: at 1.0 SmolLM2-135M's tool arguments are mostly noise; at 0.4 it copies the test path nearly every time.
const TEMPERATURE = Number(arg('temperature', '0.7'));
// Rubric weights over swe-grep's defaults. Its defaults score a wrong answer (-0.8) below no answer (-0.5), so
// GRPO's advantages teach a small model to stop answering before it finds a right one: the first attempt's
// learning run went silent in 15 of 28 episodes against the control's 5 (BENCHMARKS.md). Here a wrong answer
// (-0.25) scores above silence and a right one (1.5) far above both.
const RUBRIC = arg('rubric', 'incorrect_files_penalty=0.25,completion_bonus=0.5');
const rubricToml = RUBRIC === '' ? '' : `[env.rubric]\n${RUBRIC.split(',').map((kv) => {
  const [k, v] = kv.split('=');
  if (!k || !/^[a-z_]+$/.test(k) || v === undefined || !Number.isFinite(Number(v))) throw new Error(`--rubric: "${kv}" is not name=number (e.g. completion_bonus=0.5)`);
  return `${k} = ${Number(v)}`;
}).join('\n')}\n`;
const TASKS = arg('tasks', 'traceback');
if (TASKS !== 'traceback' && TASKS !== 'plain') throw new Error(`--tasks must be traceback or plain, got ${JSON.stringify(TASKS)}`);

/** Run config: one-turn episodes (read the traceback, answer) keep a 30-step run and its control near an hour on 2 CPU cores. */
function config(dir: string, name: string, lr: number, dataset: string): string {
  const file = path.join(dir, `${name}.toml`);
  writeFileSync(file, `name = "${name}"
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
temperature = ${TEMPERATURE}
max_tokens = 96
tool_choice = "required"
[orchestrator]
batch_size = ${BATCH}
rollouts_per_example = ${ROLLOUTS}
seq_len = 2048
max_steps = ${STEPS}
async_level = 1
max_concurrent_rollouts = ${BATCH * ROLLOUTS}
seed = 0
[[env]]
id = "swe-grep"
dataset = "${dataset}"
[env.args]
max_tokens = 384
max_tool_calls = ${MAX_TURNS}
max_turns = ${MAX_TURNS}
few_shot = ${FEW_SHOT}
${rubricToml}`);
  return file;
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

interface EvalPoint { version: number; reward: { mean: number; lo: number; hi: number }; fileF1: number | null; episodes: number }
interface RunResult { runId: string; records: StepRecord[]; evals: EvalPoint[] }

async function train(dir: string, name: string, lr: number, dataset: string, evalSet: string): Promise<RunResult> {
  const { client, close } = await connectClient();
  const runId = `${name}-${Date.now().toString(36)}`;
  try {
    process.stderr.write(`${name}: run ${runId}, ${STEPS} steps of ${BATCH}x${ROLLOUTS} rollouts, lr ${lr}\n`);
    const input: TrainRunInput = { configPath: config(dir, name, lr, dataset), runId };
    await client.workflow.execute('TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [input] });
    const records = readFileSync(path.join(paths.artifacts(), 'runs', runId, 'metrics.jsonl'), 'utf8')
      .split('\n').filter(Boolean).map((l) => JSON.parse(l) as StepRecord);
    const final = Math.max(...records.map((r) => r.policy_version));
    process.stderr.write(`${name}: EvalSweep at v0 and v${final}, ${EVAL_TASKS} held-out tasks x k=${K}\n`);
    const res = await client.workflow.execute('EvalSweep', {
      taskQueue: TASK_QUEUES.main, workflowId: `${runId}-eval`,
      args: [{ runId, versions: [0, final], taskset: evalSet, k: K, force: true, maxConcurrent: 4 }],
    }) as EvalSweepResult;
    const store = new LocalArtifactStore();
    const evals = res.evaluated.map((e): EvalPoint => {
      const r = JSON.parse(readFileSync(store.localPath(e.key), 'utf8')) as {
        episodes: number; per_task: { reward_mean: number }[]; localization: { file: { f1: number } | null };
      };
      return { version: e.version, episodes: r.episodes, reward: bootstrapCi(r.per_task.map((t) => t.reward_mean)), fileF1: r.localization.file?.f1 ?? null };
    }).sort((a, b) => a.version - b.version);
    return { runId, records, evals };
  } finally {
    await close();
  }
}

/** A second trainer worker for the bench's duration: a trainer serves one run at a time (its lease), and the two runs go side by side. */
const SECOND_TRAINER = 'worker-trainer-bench-learn';
async function startSecondTrainer(): Promise<void> {
  const spec = workerSpecs().find((w) => w.name === 'worker-trainer');
  if (!spec) throw new Error('no worker-trainer in the stack spec (src/stack/index.ts)');
  // No metrics port (the stack's trainer holds the default one) and no liveness file (the supervisor does not own it).
  await startService({ ...spec, name: SECOND_TRAINER, args: [...spec.args, '--metrics-port', 'off'], env: { PYTHONUNBUFFERED: '1' } });
}

async function main(): Promise<void> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-bench-learn-'));
  const variant = TASKS === 'traceback' ? tracebackVariant : undefined;
  const trainSet = path.join(dir, `train-${TASKS}.jsonl`);
  writeTaskSubset(path.join(paths.tasks(), 'train.jsonl'), Number.MAX_SAFE_INTEGER, trainSet, variant);
  const evalSet = path.join(dir, `heldout-${TASKS}-first${EVAL_TASKS}.jsonl`);
  const written = writeTaskSubset(resolveTaskset('heldout').file, EVAL_TASKS, evalSet, variant);
  if (written < EVAL_TASKS) throw new Error(`the heldout task set has ${written} rows; --eval-tasks asked for ${EVAL_TASKS}`);
  await startSecondTrainer();
  let learn: RunResult;
  let control: RunResult;
  try {
    [learn, control] = await Promise.all([
      train(dir, 'bench-learn', LR, trainSet, evalSet),
      train(dir, 'bench-learn-control', 0, trainSet, evalSet),
    ]);
  } finally {
    await stopService(SECOND_TRAINER);
  }
  const reports = [
    await generateReport(learn.runId, { baseline: control.runId }),
    await generateReport(control.runId, { baseline: learn.runId }),
  ];

  const curve = (r: RunResult) => r.records.map((x) => x.mean_reward.toFixed(2)).join(' ');
  // correct_files is the recall of the gold file: 1 when the answer names it. Its step mean is the share of episodes that end correct.
  const correct = (r: RunResult) => r.records.map((x) => x.reward_components.correct_files ?? 0);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const firstLast = (xs: number[]) => { const q = Math.max(1, Math.floor(xs.length / 4)); return [mean(xs.slice(0, q)), mean(xs.slice(-q))]; };
  const evalCell = (p: EvalPoint | undefined) => (p ? `${p.reward.mean.toFixed(3)} [${p.reward.lo.toFixed(3)}, ${p.reward.hi.toFixed(3)}]` : 'n/a');
  const row = (name: string, r: RunResult) => {
    const [c0, c1] = firstLast(correct(r));
    const [r0, r1] = firstLast(r.records.map((x) => x.mean_reward));
    return `| ${name} | \`${r.runId}\` | ${r.records.length} | ${r0!.toFixed(3)} → ${r1!.toFixed(3)} | ${(100 * c0!).toFixed(1)}% → ${(100 * c1!).toFixed(1)}% | ` +
      `${evalCell(r.evals[0])} | ${evalCell(r.evals[r.evals.length - 1])} |`;
  };
  const section = writeBenchSection('learn', [
    '### Does it learn? A run against an lr-0 control (real CPU stack)',
    '',
    `Two TrainRuns of ${STEPS} steps side by side, ${BATCH} swe-grep tasks (${TASKS} issues) x ${ROLLOUTS} rollouts, ` +
      `same config, seed and tasks; lr ${LR} vs 0. Episodes of at most ${MAX_TURNS} turns, few-shot ${FEW_SHOT}, temperature ${TEMPERATURE}; rubric weights over swe-grep's defaults: ${RUBRIC || 'none'}.`,
    `EvalSweep of each at v0 and its final version on the first ${EVAL_TASKS} held-out tasks, k=${K}; reward mean over tasks`,
    'with a bootstrap 95% interval. Reward / correct share: mean of the first and last quarter of the steps.',
    '',
    `Command: \`npm run bench:learn -- --steps ${STEPS} --batch ${BATCH} --rollouts ${ROLLOUTS} --lr ${LR} --eval-tasks ${EVAL_TASKS} --k ${K} ` +
      `--max-turns ${MAX_TURNS} --few-shot ${FEW_SHOT} --temperature ${TEMPERATURE} --tasks ${TASKS}\` (source \`src/bench/learn.ts\`).`,
    `Machine: ${machineLine()}.`,
    '',
    '| run | id | steps | reward (first → last quarter) | correct file (first → last quarter) | eval v0 [95% CI] | eval final [95% CI] |',
    '| --- | --- | ---: | --- | --- | --- | --- |',
    row(`lr ${LR}`, learn),
    row('control, lr 0', control),
    '',
    `Reward per step, lr ${LR}: ${curve(learn)}`,
    '',
    `Reward per step, control: ${curve(control)}`,
    '',
    `Both curves are in each run's HTML report (the other run dashed): ${reports.map((r) => `\`${path.relative(paths.artifacts(), r.file)}\``).join(', ')} ` +
      `under the artifacts root, or \`ratchet report ${learn.runId} --baseline ${control.runId}\`.`,
  ]);
  process.stdout.write(`${section}\n`);
}

if (require.main === module) {
  main().catch((err: unknown) => {
    process.stderr.write(`${(err as Error).stack ?? String(err)}\n`);
    process.exit(1);
  });
}
