/**
 * bench:learn's multi-turn case (issues 28, 38): does RL teach an agent past its warm start?
 * Everything below is fixed before a run (the defaults), not tuned after it.
 *
 * 1. Tasks: plain swe-grep tasks, whose answer needs a search (the issue quotes the failing
 *    test and the exception, never the file), tool_choice "auto", up to `maxTurns` turns.
 *    train.jsonl and heldout.jsonl are pooled and split into disjoint sets (learnAgent.agentSplit):
 *    `evalRandom` random rows of the training packages held out (the primary split), tasks of one
 *    package nothing trains on (the secondary split), and the rest cut into the demonstration tasks
 *    and the RL pool, so RL never trains on a task SFT saw.
 * 2. Warm start: a path-only procedure a 135M model can carry out (find the module the failing test
 *    is named after, answer the path find printed; src/sft/solvers/sweGrep.ts sweGrepPathSolver),
 *    demonstrated on real sandboxes and kept at reward 1; some demonstrations are held out, and the
 *    SftRun is stopped when their loss (scored by vLLM on each step's adapter) has not improved for
 *    `sftPatience` steps; the warm start is the best step's adapter.
 * 3. Pre-flight: the warm start on `preflightTasks` tasks of the RL pool. A pass rate outside
 *    [preflightLo, preflightHi] means groups would score alike: the bench reports "no signal
 *    possible" and trains nothing.
 * 4. Arms, for each training seed: an RL TrainRun from the warm start ([model] init_from its best
 *    step) with reward file F1 (a wrong answer and silence both 0), RLOO advantages, difficulty
 *    filtering, pass-rate pools, async_level 0 (each step sampled by the newest version, recorded
 *    in its step record); the control is the warm start itself (`--control runs`: lr-0 runs).
 * 5. An EvalSweep of each arm on the held-out tasks, k samples a task, seeded by task and sample
 *    only (`seeds: "task-sample"`), so the two arms' episodes of a task draw common random numbers.
 *    The figures (src/bench/learnAgentSection.ts): reward, file precision / recall / F1, the share
 *    that searched before answering, turns, tool calls, informative groups per step; the paired
 *    per-task difference RL − control per seed on the primary split, with a bootstrap 95% interval.
 *
 *   npm run bench:learn [-- --seeds 2 --steps 6 ...]    (flags: FLAGS below)
 *   npm run bench:learn -- --preflight-only              (demonstrations, SFT and the pre-flight; no RL)
 *   npm run bench:learn -- --case one-turn ...           (the one-turn traceback case, src/bench/learn.ts)
 */
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';
import type { Client } from '@temporalio/client';
import { connectClient } from '../cli/temporal';
import { startOrAttach } from '../workflows/client';
import { awaitResult } from '../connection/awaitResult';
import { LocalArtifactStore } from '../artifacts/store';
import { parseRunConfig } from '../config/load';
import { sweGrepRubric } from '../envs/swe-grep/rewards';
import { readStepRecords } from '../records/runRecords';
import { generateReport } from '../report';
import { loadModelTokenizer } from '../samples/tokenizer';
import { SandboxManager } from '../sandbox/manager';
import { makeDemonstrations } from '../sft/demos';
import { sweGrepPathSolver } from '../sft/solvers/sweGrep';
import { sftSegments } from '../sft/trajectories';
import { paths, TASK_QUEUES } from '../shared/paths';
import { loadTasks } from '../tasks/load';
import { readTaskRows, writeTaskRows } from '../tasks/subset';
import { Trajectory } from '../contracts/trajectory';
import type { StepRecord, TrainRunInput } from '../contracts';
import type { EvalSweepInput } from '../contracts/eval';
import { rubricToml, startExtraTrainers, stopExtraTrainers, writeReports } from './learn';
import { agentSplit, episodeBehaviour, fileF1Weights, maskedNll, preflightDecision, sftStopping, type EpisodeBehaviour, type Preflight } from './learnAgent';

export interface AgentLearnOptions {
  /** Training seeds per arm ([orchestrator] seed 0..seeds-1): the task order and the sampling seeds. */
  seeds: number;
  steps: number;
  batch: number;
  rollouts: number;
  lr: number;
  /** Optimiser updates per step (trainer minibatches). */
  minibatches: number;
  advantage: 'rloo' | 'dr_grpo';
  /** Difficulty filtering's refill rounds ([orchestrator.difficulty_filter] max_refill_rounds; 0: filter off). */
  refillRounds: number;
  maxTurns: number;
  temperature: number;
  /** "file_f1" (the swe-grep rubric as file F1 alone: learnAgent.fileF1Weights), or name=number weights. */
  rubric: string;
  /** Reward at or above which an episode passes (the pre-flight's and the pass-rate pool's). */
  passReward: number;
  /** Tasks the scripted solver demonstrates (disjoint from the RL pool); those it solves (reward >= 1) are the SFT data. */
  demos: number;
  /** Kept demonstrations held out of SFT: their loss stops it. */
  demoHeldOut: number;
  /** Most SFT steps; it stops earlier when the held-out loss has not improved for `sftPatience` steps. */
  sftSteps: number;
  sftPatience: number;
  sftBatch: number;
  sftLr: number;
  /** RL-pool tasks the pre-flight samples the warm start on, `preflightK` samples each. */
  preflightTasks: number;
  preflightK: number;
  /** The share of pre-flight tasks whose samples must score differently (informative groups). */
  preflightInformative: number;
  /** The pass-rate band in which RL can get a signal; outside it the bench trains nothing. */
  preflightLo: number;
  preflightHi: number;
  /** The package every task of which is held out (the secondary split). */
  heldOutPackage: string;
  /** Held out: tasks of the unseen package (secondary), random rows of the training packages (primary). */
  evalUnseen: number;
  evalRandom: number;
  k: number;
  /**
   * Episodes an EvalSweep keeps in flight (its maxConcurrent). Each is ~95% waiting on vLLM, whose CPU decode
   * batches: 8 requests of 32 tokens beside the bench gave 5x the tokens/s of one (BENCHMARKS.md, "Where an
   * agent-bench step's time goes"). More than the rollout worker's slots (RATCHET_ROLLOUT_SLOTS) wait in the task queue.
   */
  evalConcurrency: number;
  /**
   * Runs at a time (a trainer worker each), in waves by seed: each trainer holds ~8 GiB on CPU at these
   * sequence lengths, and four beside vLLM ran a 24 GiB machine out of memory (vLLM was OOM-killed).
   */
  parallelRuns: number;
  /**
   * The control arm: "warm-start" evaluates the warm start's adapter itself, "runs" trains an lr-0 TrainRun
   * a seed from it and evaluates that; the adapters are the same bytes, the runs cost trainer time.
   */
  control: 'warm-start' | 'runs';
  /** Reuse a finished SftRun of an earlier bench run (its demonstrations, held-out losses and warm start). */
  sftRun?: string;
  /**
   * The stamp of an earlier bench process to carry on (`--resume <stamp>`, the suffix of its runs' ids): its
   * workflows are Temporal's and went on without it (or wait in the stopped stack's database), so the same ids
   * attach to what is running and read back what finished; only what never started is started.
   */
  resume?: string;
  /**
   * The SftRun step to start RL from instead of its lowest held-out loss (`--warm-step <n>`): a warm start
   * trained until the loss is lowest can answer every task the same way every time, which no group can learn
   * from; the pre-flight says whether the chosen step varies.
   */
  warmStep?: number;
}

// Fixed before the run (issue 38), sized for ~100 minutes on this 2-core, 24 GiB machine: one process trains
// at a time on the CPU (two trainers beside vLLM trained 8x slower each). The run of 7 Dec took 53.7 minutes
// (BENCHMARKS.md, "Does it learn as an agent?").
export const AGENT_DEFAULTS: AgentLearnOptions = {
  seeds: 2,
  steps: 6,
  // Four groups of four: with RLOO each rollout's baseline is the other three.
  batch: 4,
  rollouts: 4,
  // 12 updates a seed (6 steps x 2 mini-batches) at a LoRA rate a third of the first bench's 1e-3.
  lr: 3e-4,
  minibatches: 2,
  advantage: 'rloo',
  refillRounds: 2,
  // The demonstrations take 2 turns (find, answer); two spare.
  maxTurns: 4,
  temperature: 0.7,
  rubric: 'file_f1',
  passReward: 1,
  demos: 56,
  demoHeldOut: 8,
  // Six steps: the warm start is then step 5 (v6), whose held-out loss is lowest of the six and which still
  // varies within a task. Trained on, the policy answers each task one way: between steps 5 and 8 the share of
  // pre-flight tasks whose 4 samples differ fell from 8 of 16 to 1 (BENCHMARKS.md, the 28 Nov variance sweep).
  sftSteps: 6,
  sftPatience: 2,
  sftBatch: 8,
  sftLr: 2e-3,
  preflightTasks: 16,
  // The run's group size: the pre-flight measures variance within a task, as a group sees it.
  preflightK: 4,
  // A step wants `batch` informative groups from at most (1 + refillRounds) x batch draws: a third of them.
  preflightInformative: 0.33,
  preflightLo: 0.15,
  preflightHi: 0.85,
  // The smallest package of the task sets (inflection: 23 tasks): the training packages keep the most rows.
  heldOutPackage: 'inflection',
  evalUnseen: 6,
  evalRandom: 24,
  k: 2,
  evalConcurrency: 8,
  parallelRuns: 1,
  control: 'warm-start',
};

type NumKey = Exclude<keyof AgentLearnOptions, 'rubric' | 'heldOutPackage' | 'sftRun' | 'resume' | 'warmStep' | 'control' | 'advantage'>;
const FLAGS: Record<string, { key: NumKey; min: number; max?: number }> = {
  seeds: { key: 'seeds', min: 1 }, steps: { key: 'steps', min: 1 }, batch: { key: 'batch', min: 1 }, rollouts: { key: 'rollouts', min: 2 },
  lr: { key: 'lr', min: 0 }, minibatches: { key: 'minibatches', min: 1 }, 'refill-rounds': { key: 'refillRounds', min: 0, max: 16 },
  'max-turns': { key: 'maxTurns', min: 3 }, temperature: { key: 'temperature', min: 0 }, 'pass-reward': { key: 'passReward', min: 0 },
  demos: { key: 'demos', min: 2 }, 'demo-held-out': { key: 'demoHeldOut', min: 1 },
  'sft-steps': { key: 'sftSteps', min: 1 }, 'sft-patience': { key: 'sftPatience', min: 1 }, 'sft-batch': { key: 'sftBatch', min: 1 }, 'sft-lr': { key: 'sftLr', min: 0 },
  'preflight-tasks': { key: 'preflightTasks', min: 1 }, 'preflight-k': { key: 'preflightK', min: 2 },
  'preflight-informative': { key: 'preflightInformative', min: 0, max: 1 },
  'preflight-lo': { key: 'preflightLo', min: 0, max: 1 }, 'preflight-hi': { key: 'preflightHi', min: 0, max: 1 },
  'eval-unseen': { key: 'evalUnseen', min: 1 }, 'eval-random': { key: 'evalRandom', min: 1 }, k: { key: 'k', min: 1 },
  'eval-concurrency': { key: 'evalConcurrency', min: 1 }, 'parallel-runs': { key: 'parallelRuns', min: 1 },
};

/** `--name value` flags over the defaults; a bad value is an error naming the flag. */
export function parseAgentArgs(argv: string[]): AgentLearnOptions {
  const o: AgentLearnOptions = { ...AGENT_DEFAULTS };
  const flag = (name: string): string | undefined => { const i = argv.indexOf(`--${name}`); return i >= 0 ? argv[i + 1] : undefined; };
  for (const [name, { key, min, max }] of Object.entries(FLAGS)) {
    const v = flag(name);
    if (v === undefined) continue;
    const x = Number(v);
    if (!Number.isFinite(x) || x < min || (max !== undefined && x > max)) throw new Error(`--${name}: ${JSON.stringify(v)} is not a number >= ${min}${max !== undefined ? ` and <= ${max}` : ''}`);
    o[key] = x;
  }
  if (o.preflightLo > o.preflightHi) throw new Error(`--preflight-lo ${o.preflightLo} is above --preflight-hi ${o.preflightHi}. Fix: lo <= hi`);
  o.rubric = flag('rubric') ?? o.rubric;
  agentRubricToml(o.rubric); // validates
  o.heldOutPackage = flag('held-out-package') ?? o.heldOutPackage;
  const control = flag('control') ?? o.control;
  if (control !== 'warm-start' && control !== 'runs') throw new Error(`--control: ${JSON.stringify(control)} is not warm-start or runs`);
  o.control = control;
  const advantage = flag('advantage') ?? o.advantage;
  if (advantage !== 'rloo' && advantage !== 'dr_grpo') throw new Error(`--advantage: ${JSON.stringify(advantage)} is not rloo or dr_grpo (neither divides by the group std)`);
  o.advantage = advantage;
  const sftRun = flag('sft-run');
  if (sftRun !== undefined) o.sftRun = sftRun;
  const warmStep = flag('warm-step');
  if (warmStep !== undefined) {
    if (!/^\d+$/.test(warmStep)) throw new Error(`--warm-step: ${JSON.stringify(warmStep)} is not a step number. Fix: give a step of the SftRun (0, 1, ...)`);
    o.warmStep = Number(warmStep);
  }
  const resume = flag('resume');
  if (resume !== undefined) {
    if (!/^[a-z0-9]+$/.test(resume)) throw new Error(`--resume: ${JSON.stringify(resume)} is not a bench stamp. Fix: give the suffix of the bench's run ids (bench-agent-rl-s0-<stamp>)`);
    o.resume = resume;
  }
  return o;
}

/** The [env.rubric] section: the file_f1 preset written out weight by weight, or the name=number list. */
export function agentRubricToml(rubric: string): string {
  if (rubric !== 'file_f1') return rubricToml(rubric);
  return `[env.rubric]\n${Object.entries(fileF1Weights(sweGrepRubric)).map(([k, v]) => `${k} = ${v}`).join('\n')}\n`;
}

const envArgs = (o: AgentLearnOptions) => ({ max_tokens: 128 * o.maxTurns, max_tool_calls: o.maxTurns, max_turns: o.maxTurns });

// micro_batch_tokens 2048. One recorded RL step (16 samples, 13,831 tokens, 2 minibatches; SmolLM2-135M,
// fresh LoRA, 1 torch thread, niced beside the running bench): 2048 computes 6,633 tokens in 4 micro-batches,
// 4096 and 8192 one prefix tree per minibatch, 5,217 tokens in 2, yet all take the same CPU time
// (155 and 160 s, 152 and 158 s, 158 s; same loss and gradient norm): the tree's dense [L, L] attention mask costs what
// the shared prefix saves. Peak RSS 3.9, 4.2-5.0 and 6.5 GiB: 2048 leaves the most room beside vLLM.
const trainerToml = (extra = '') => `[trainer]
device = "cpu"
micro_batch_tokens = 2048
${extra}[trainer.ac]
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
${agentRubricToml(o.rubric)}`;
}

/** The SftRun's config: the demonstrations, at most `sftSteps` steps of `sftBatch`; its episodes' settings are the arms'. */
export function agentSftConfigToml(o: AgentLearnOptions, p: { name: string; data: string; dataset: string }): string {
  return `name = "${p.name}"
${trainerToml()}
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

/**
 * One arm's run config: the two arms of a seed differ in name and lr only. limit_ended stays "score": under
 * file F1 an episode cut off at a limit scores 0 like a wrong answer, and masking it would drop the
 * right-against-silent contrast from its group.
 */
export function agentRunConfigToml(o: AgentLearnOptions, p: { name: string; lr: number; seed: number; dataset: string; initFrom: string }): string {
  return `name = "${p.name}"
[model]
init_from = "${p.initFrom}"
${trainerToml(`minibatches = ${o.minibatches}\n`)}
[trainer.optim]
lr = ${p.lr}
[orchestrator]
batch_size = ${o.batch}
rollouts_per_example = ${o.rollouts}
seq_len = 2048
max_steps = ${o.steps}
async_level = 0
limit_ended = "score"
max_concurrent_rollouts = ${o.batch * o.rollouts}
seed = ${p.seed}
[orchestrator.advantage]
kind = "${o.advantage}"
[orchestrator.difficulty_filter]
enabled = ${o.refillRounds > 0}
max_refill_rounds = ${Math.max(1, o.refillRounds)}
[orchestrator.pass_rate_pool]
enabled = true
pass_reward = ${o.passReward}
${episodeToml(o, p.dataset)}`;
}

export type EvalSplit = 'unseen' | 'random' | 'pool';

/** One eval episode, as the bench reads it from its trajectory. */
export interface AgentEpisode {
  task: string;
  /** The sample's index in its EvalSweep (0..k-1 a task). */
  sample: number;
  split: EvalSplit;
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
  /** The EvalSweep of its held-out episodes (absent in results read back from stored runs). */
  evalWorkflowId?: string;
}

export interface SftResult {
  runId: string;
  demosRan: number;
  demosKept: number;
  /** Kept demonstrations held out of SFT: their loss stops it. */
  demosHeldOut: number;
  records: StepRecord[];
  /** The held-out demonstrations' mean NLL per trained token after each step (vLLM's prompt logprobs of its adapter). */
  heldOutLoss: number[];
  /** The step with the lowest held-out loss: the warm start. */
  bestStep: number;
  /** That step's policy version (what the control and the pre-flight evaluate). */
  version: number;
}

export interface AgentLearnResult {
  sft: SftResult;
  preflight: Preflight;
  /** The pre-flight's EvalSweep (absent in results read back from stored runs). */
  preflightWorkflowId?: string;
  /** Empty where the pre-flight found no signal possible (or with --preflight-only). */
  arms: ArmRun[];
  tasks: { demo: number; rl: number; unseen: number; random: number };
  evalTasks: { unseen: number; random: number };
  /** Each run's HTML report, its seed's other arm drawn beside it. */
  reports: string[];
  wallS: number;
}

/**
 * A version's eval episodes from runs/<run>/evals/trajectories/eval-v<version>-<task>/: for each
 * sample index the newest file (a retried episode leaves its earlier attempt's file beside it).
 */
export function readEvalEpisodes(runId: string, version: number, splitOf: ReadonlyMap<string, EvalSplit>, samples: number): AgentEpisode[] {
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
const retryNote = (err: Error, downMs: number) => log(`Temporal unreachable for ${Math.round(downMs / 1000)} s (${err.message}); waiting for it`);

/** What a bench SftRun came from and how it stopped, kept beside the bench's results (`--sft-run` reads it). */
const sftMetaFile = (sftRunId: string) => path.join(paths.artifacts(), 'bench', `learn-agent-demos-${sftRunId}.json`);

/** The newest checkpoint directory a run saved for a step (`step-<n>` or `step-<n>-<batch sha>`, never an `.attempt-`). */
function checkpointDir(runId: string, step: number): string | undefined {
  const root = path.join(paths.artifacts(), 'runs', runId, 'checkpoints');
  if (!existsSync(root)) return undefined;
  const dirs = readdirSync(root).filter((d) => (d === `step-${step}` || d.startsWith(`step-${step}-`)) && !d.includes('.attempt-'));
  return dirs.length ? path.join(root, dirs.sort().pop()!) : undefined;
}

interface ScoredSample { ids: number[]; mask: number[] }

/**
 * The held-out demonstrations' mean NLL per trained token under one step's adapter, scored by vLLM: the
 * adapter is loaded under a bench name of its own (the run's own names are the run's to load and unload),
 * each sample sent as a prompt with prompt_logprobs, then unloaded. Temperature 1: the SFT loss's.
 */
async function heldOutLoss(baseUrl: string, runId: string, step: number, samples: ScoredSample[]): Promise<number> {
  const dir = checkpointDir(runId, step);
  if (!dir || !existsSync(path.join(dir, 'adapter'))) throw new Error(`${runId} step ${step}: no checkpoint adapter under ${path.join(paths.artifacts(), 'runs', runId, 'checkpoints')}`);
  const name = `bench-heldout/${runId}-s${step}`;
  const post = async (url: string, body: unknown) => {
    const res = await fetch(`${baseUrl}/${url}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    const text = await res.text();
    if (!res.ok) throw new Error(`${baseUrl}/${url}: HTTP ${res.status} ${text.slice(0, 300)}`);
    return text;
  };
  await post('load_lora_adapter', { lora_name: name, lora_path: path.join(dir, 'adapter') });
  try {
    let sum = 0;
    let tokens = 0;
    for (const s of samples) {
      const body = JSON.parse(await post('completions', { model: name, prompt: s.ids, max_tokens: 1, temperature: 1, prompt_logprobs: 0 })) as
        { choices: { prompt_logprobs: (Record<string, { logprob: number }> | null)[] }[] };
      const r = maskedNll(s.ids, s.mask, body.choices[0]!.prompt_logprobs);
      sum += r.sum;
      tokens += r.tokens;
    }
    return sum / Math.max(1, tokens);
  } finally {
    await post('unload_lora_adapter', { lora_name: name }).catch(() => undefined);
  }
}

/**
 * The warm start: the path-only procedure's demonstrations on the demonstration tasks, some of those kept held
 * out, then an SftRun on the rest, stopped when the held-out loss has not improved for `sftPatience` steps.
 */
export async function warmStart(o: AgentLearnOptions, p: { dir: string; demoFile: string; dataset: string; runId: string; client: Client }): Promise<SftResult> {
  const demoTasks = (await loadTasks(p.demoFile, { onInvalid: 'skip' })).tasks;
  const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
  const demos = await makeDemonstrations({
    envId: 'swe-grep', tasks: demoTasks, taskSetDir: p.dir, sandboxes, minReward: 1, envArgs: envArgs(o), concurrency: 2, solver: sweGrepPathSolver,
  }).finally(() => sandboxes.close());
  if (demos.kept.length < o.demoHeldOut + 1) {
    throw new Error(`${demos.kept.length} of ${demos.all.length} demonstrations reached reward 1: too few to hold ${o.demoHeldOut} out. Fix: raise --demos or lower --demo-held-out`);
  }
  const heldOut = demos.kept.slice(0, o.demoHeldOut);
  const data = path.join(p.dir, 'demos.jsonl');
  writeFileSync(data, demos.kept.slice(o.demoHeldOut).map((t) => JSON.stringify(t)).join('\n') + '\n');
  writeFileSync(path.join(p.dir, 'demos-heldout.jsonl'), heldOut.map((t) => JSON.stringify(t)).join('\n') + '\n');
  log(`demonstrations: ${demos.kept.length} of ${demos.all.length} kept; ${heldOut.length} held out for the SFT loss -> ${data}`);
  const config = path.join(p.dir, 'sft.toml');
  const toml = agentSftConfigToml(o, { name: 'bench-agent-sft', data, dataset: p.dataset });
  writeFileSync(config, toml);
  const rc = parseRunConfig(toml, config);
  const tok = loadModelTokenizer(rc.model.path);
  const samples = heldOut.flatMap((t, i) => sftSegments(t, tok, `held-out demonstration ${i}`).map((s) => ({ ids: s.ids, mask: s.mask })));
  const baseUrl = rc.inference.base_urls[0];

  log(`SftRun ${p.runId}: at most ${o.sftSteps} steps of ${o.sftBatch}, lr ${o.sftLr}, stopped after ${o.sftPatience} steps without a lower held-out loss`);
  const handle = await startOrAttach(p.client, 'SftRun', { taskQueue: TASK_QUEUES.main, workflowId: p.runId, args: [{ configPath: config, runId: p.runId } satisfies TrainRunInput] });
  let finished = false;
  const done = awaitResult(handle, { onRetry: retryNote }).finally(() => { finished = true; });
  const losses: number[] = [];
  let stopAsked = false;
  const store = new LocalArtifactStore();
  for (;;) {
    const last = finished;
    const records = await readStepRecords(store, p.runId).catch(() => [] as StepRecord[]);
    while (losses.length < records.length) {
      const step = records[losses.length]!.step;
      const loss = await heldOutLoss(baseUrl, p.runId, step, samples);
      losses.push(loss);
      log(`SftRun step ${step}: held-out demonstration loss ${loss.toFixed(4)} (train loss ${Number((records[losses.length - 1]!.trainer as { loss?: number }).loss ?? NaN).toFixed(4)})`);
    }
    if (!stopAsked && sftStopping(losses, o.sftPatience).stop) {
      stopAsked = true;
      log(`SftRun: no lower held-out loss for ${o.sftPatience} steps; stopping after the current step`);
      await handle.executeUpdate('stopAfterCurrentStep', { args: [{ identity: 'bench:learn', reason: `held-out demonstration loss did not improve for ${o.sftPatience} steps` }] })
        .catch((err: unknown) => log(`stop refused (the run may have ended): ${(err as Error).message}`));
    }
    if (last) break;
    await Promise.race([done.catch(() => undefined), new Promise((r) => setTimeout(r, 3000))]);
  }
  await done;
  const records = await readStepRecords(store, p.runId);
  const best = sftStopping(losses, o.sftPatience).best;
  const meta = { ran: demos.all.length, kept: demos.kept.length, heldOut: heldOut.length, heldOutLoss: losses, bestStep: records[best]!.step };
  mkdirSync(path.dirname(sftMetaFile(p.runId)), { recursive: true });
  writeFileSync(sftMetaFile(p.runId), JSON.stringify(meta));
  return sftFrom(p.runId, meta, records);
}

function sftFrom(runId: string, meta: { ran: number; kept: number; heldOut: number; heldOutLoss: number[]; bestStep: number }, records: StepRecord[]): SftResult {
  const best = records.find((r) => r.step === meta.bestStep);
  if (!best) throw new Error(`${runId}: no step record for its best step ${meta.bestStep}`);
  return {
    runId, demosRan: meta.ran, demosKept: meta.kept, demosHeldOut: meta.heldOut, records,
    heldOutLoss: meta.heldOutLoss, bestStep: meta.bestStep, version: best.policy_version,
  };
}

/** The SftRun's checkpoint at `step` as the warm start, in place of its lowest held-out loss. */
function atStep(sft: SftResult, step: number): SftResult {
  const record = sft.records.find((r) => r.step === step);
  if (!record) throw new Error(`--warm-step ${step}: ${sft.runId} has no step ${step} (steps ${sft.records.map((r) => r.step).join(', ')}). Fix: give one of them`);
  return { ...sft, bestStep: step, version: record.policy_version };
}

/** The warm start of an earlier bench run, read back: its records and what its meta file says. */
async function sftResult(sftId: string): Promise<SftResult> {
  const file = sftMetaFile(sftId);
  if (!existsSync(file)) throw new Error(`--sft-run ${sftId}: no ${file}. Fix: name an SftRun a bench:learn agent run made`);
  const meta = JSON.parse(readFileSync(file, 'utf8')) as { ran: number; kept: number; heldOut?: number; heldOutLoss?: number[]; bestStep?: number };
  const records = await readStepRecords(new LocalArtifactStore(), sftId);
  // Meta files from before held-out stopping: the last step was the warm start.
  return sftFrom(sftId, { ran: meta.ran, kept: meta.kept, heldOut: meta.heldOut ?? 0, heldOutLoss: meta.heldOutLoss ?? [],
    bestStep: meta.bestStep ?? records[records.length - 1]!.step }, records);
}

/** The bench's task files and split (seeded: the same options give the same sets). */
export function benchTasks(o: AgentLearnOptions, dir: string) {
  const all = [path.join(paths.tasks(), 'train.jsonl'), path.join(paths.tasks(), 'heldout.jsonl')]
    .flatMap((f) => readTaskRows(f)) as (Record<string, unknown> & { repo: string; instance_id: string })[];
  const s = agentSplit(all, { heldOutPackage: o.heldOutPackage, evalRandom: o.evalRandom, evalUnseen: o.evalUnseen, demoTasks: o.demos, seed: 1 });
  const file = (name: string, rows: typeof all) => { const f = path.join(dir, name); writeTaskRows(rows, f); return f; };
  const preflightRows = s.rl.slice(0, o.preflightTasks);
  const files = {
    demoFile: file('demo-tasks.jsonl', s.demo), rlFile: file('rl-pool.jsonl', s.rl),
    evalFile: file('heldout-plain.jsonl', [...s.random, ...s.unseen]), preflightFile: file('preflight.jsonl', preflightRows),
  };
  const splitOf = new Map<string, EvalSplit>([
    ...s.unseen.map((t) => [t.instance_id, 'unseen'] as const), ...s.random.map((t) => [t.instance_id, 'random'] as const),
    ...preflightRows.map((t) => [t.instance_id, 'pool'] as const),
  ]);
  log(`tasks: ${s.demo.length} demonstration, ${s.rl.length} RL pool (${[...new Set(s.rl.map((t) => t.repo))].join(', ')}), ` +
    `held out ${s.random.length} random rows (primary) + ${s.unseen.length} of ${o.heldOutPackage} (secondary)`);
  return {
    ...files, splitOf, tasks: { demo: s.demo.length, rl: s.rl.length, unseen: s.unseen.length, random: s.random.length },
    evalTasks: { unseen: s.unseen.length, random: s.random.length },
  };
}

/**
 * A bench result read back from finished runs (`--render-agent-runs`): the SftRun and the arms' runs, named
 * bench-agent-<rl|control>-s<seed>-..., each with its EvalSweep of its final version already recorded; with
 * `--control warm-start`, the SftRun's own EvalSweep of its best version is the control.
 */
export async function storedAgentResult(o: AgentLearnOptions, sftId: string, runIds: string[], dir: string): Promise<AgentLearnResult> {
  const { splitOf, evalTasks, tasks } = benchTasks(o, dir);
  const arms = await Promise.all(runIds.map(async (runId): Promise<ArmRun> => {
    const m = /^bench-agent-(rl|control)-s(\d+)-/.exec(runId);
    if (!m) throw new Error(`${runId}: not a bench:learn agent run (bench-agent-<rl|control>-s<seed>-...)`);
    return armResult(m[1] as 'rl' | 'control', Number(m[2]), runId, await readStepRecords(new LocalArtifactStore(), runId), splitOf, o.k);
  }));
  const sft = await sftResult(sftId);
  if (o.control === 'warm-start') arms.push(warmStartControl(o, sft, splitOf));
  return { sft, preflight: preflightOf(o, sft, splitOf), arms, tasks, evalTasks, reports: await armReports(arms), wallS: 0 };
}

const finalVersionOf = (records: StepRecord[]): number => Math.max(...records.map((r) => r.policy_version));
const heldOutOnly = (eps: AgentEpisode[]) => eps.filter((e) => e.split !== 'pool');

/** A finished arm's run: its step records and its final version's held-out episodes (`k` a task). */
function armResult(arm: 'rl' | 'control', seed: number, runId: string, records: StepRecord[], splitOf: ReadonlyMap<string, EvalSplit>, k: number): ArmRun {
  const finalVersion = finalVersionOf(records);
  return { arm, seed, runId, records, finalVersion, episodes: heldOutOnly(readEvalEpisodes(runId, finalVersion, splitOf, k)) };
}

/**
 * The control: the warm start's own EvalSweep, k samples a task seeded by task and sample, the same seeds
 * every RL seed's sweep draws, so one control pairs with each seed. No records: the control trains nothing.
 */
function warmStartControl(o: AgentLearnOptions, sft: SftResult, splitOf: ReadonlyMap<string, EvalSplit>): ArmRun {
  return { arm: 'control', seed: -1, runId: sft.runId, records: [], finalVersion: sft.version, episodes: heldOutOnly(readEvalEpisodes(sft.runId, sft.version, splitOf, o.k)) };
}

/** The pre-flight's verdict from the warm start's episodes on the RL pool. */
function preflightOf(o: AgentLearnOptions, sft: SftResult, splitOf: ReadonlyMap<string, EvalSplit>): Preflight {
  const byTask = new Map<string, number[]>();
  for (const e of readEvalEpisodes(sft.runId, sft.version, splitOf, o.preflightK).filter((x) => x.split === 'pool')) {
    byTask.set(e.task, [...(byTask.get(e.task) ?? []), e.reward]);
  }
  return preflightDecision([...byTask.values()], o.passReward, [o.preflightLo, o.preflightHi], o.preflightInformative);
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

/** The EvalSweep input of one version of a run, seeded by task and sample only (common random numbers across arms). */
export function agentSweepInput(o: { runId: string; version: number; evalFile: string; k: number; concurrency: number }): EvalSweepInput {
  return { runId: o.runId, versions: [o.version], taskset: o.evalFile, k: o.k, force: true, maxConcurrent: o.concurrency, seeds: 'task-sample' };
}

async function evaluate(client: Client, o: Parameters<typeof agentSweepInput>[0] & { workflowId: string }): Promise<void> {
  await awaitResult(await startOrAttach(client, 'EvalSweep', {
    taskQueue: TASK_QUEUES.main, workflowId: o.workflowId, args: [agentSweepInput(o)],
  }), { onRetry: retryNote });
}

/**
 * The whole multi-turn bench on the running stack (see the file comment). `preflightOnly` stops after the
 * pre-flight; `assumeSignal` runs the arms whatever the pre-flight says (CI's short version, whose warm start
 * is two SFT steps: it checks the path, not the signal).
 */
export async function runAgentBench(o: AgentLearnOptions, dir: string, mode: { preflightOnly?: boolean; assumeSignal?: boolean } = {}): Promise<AgentLearnResult> {
  const t0 = Date.now();
  const stamp = o.resume ?? Date.now().toString(36);
  if (o.resume) log(`resuming bench ${stamp}: its workflows that run are attached to, those that finished are read back`);
  const { demoFile, rlFile, evalFile, preflightFile, splitOf, tasks, evalTasks } = benchTasks(o, dir);
  const seeds = Array.from({ length: o.seeds }, (_, seed) => seed);
  const arms = seeds.flatMap((seed) => [
    { arm: 'rl' as const, seed, lr: o.lr }, ...(o.control === 'runs' ? [{ arm: 'control' as const, seed, lr: 0 }] : []),
  ]);

  const { client, close } = await connectClient();
  const trainers = mode.preflightOnly ? [] : await startExtraTrainers(Math.min(o.parallelRuns, arms.length) - 1);
  try {
    const sftId = o.sftRun ?? (o.resume && existsSync(sftMetaFile(`bench-agent-sft-${stamp}`)) ? `bench-agent-sft-${stamp}` : undefined);
    const trained = sftId ? await sftResult(sftId) : await warmStart(o, { dir, demoFile, dataset: rlFile, runId: `bench-agent-sft-${stamp}`, client });
    const sft = o.warmStep === undefined ? trained : atStep(trained, o.warmStep);
    const warm = `${sft.runId}@${sft.bestStep}`;
    log(`pre-flight: EvalSweep of the warm start ${warm} (v${sft.version}) on ${Math.min(o.preflightTasks, tasks.rl)} RL-pool tasks x k=${o.preflightK}`);
    // The version in the ids: a resumed bench with another --warm-step must not attach to the other step's sweeps.
    const preflightWorkflowId = `${sft.runId}-preflight-v${sft.version}-${stamp}`;
    await evaluate(client, { runId: sft.runId, version: sft.version, evalFile: preflightFile, k: o.preflightK, concurrency: o.evalConcurrency, workflowId: preflightWorkflowId });
    const preflight = preflightOf(o, sft, splitOf);
    log(`pre-flight: ${preflight.passed} of ${preflight.episodes} passed (${preflight.passRate.toFixed(3)}), band [${o.preflightLo}, ${o.preflightHi}]; ` +
      `${preflight.informativeTasks} of ${preflight.tasks} tasks informative (need ${o.preflightInformative}): ` +
      (preflight.signal ? 'signal possible' : `no signal possible: ${preflight.reason}`));
    const base = { sft, preflight, preflightWorkflowId, tasks, evalTasks };
    if (mode.preflightOnly || (!preflight.signal && !mode.assumeSignal)) return { ...base, arms: [], reports: [], wallS: Math.round((Date.now() - t0) / 1000) };

    const controlEval = `${sft.runId}-eval-v${sft.version}-${stamp}`;
    if (o.control === 'warm-start') {
      // The control first: the warm start alone on the machine, and its figures are there if a run fails later.
      log(`control: EvalSweep of the warm start v${sft.version} on ${evalTasks.random + evalTasks.unseen} held-out tasks x k=${o.k}`);
      await evaluate(client, { runId: sft.runId, version: sft.version, evalFile, k: o.k, concurrency: o.evalConcurrency, workflowId: controlEval });
    }
    log(`${arms.length} TrainRuns, ${o.parallelRuns} at a time, from ${warm}: ${o.steps} steps of ${o.batch}x${o.rollouts}, lr ${o.lr}` +
      `${o.control === 'runs' ? ' vs 0' : ''}, seeds 0..${o.seeds - 1}`);
    const runArm = async (a: (typeof arms)[number]): Promise<ArmRun> => {
      const name = `bench-agent-${a.arm}-s${a.seed}`;
      const runId = `${name}-${stamp}`;
      const configPath = path.join(dir, `${name}.toml`);
      writeFileSync(configPath, agentRunConfigToml(o, { name, lr: a.lr, seed: a.seed, dataset: rlFile, initFrom: warm }));
      await awaitResult(await startOrAttach(client, 'TrainRun', { taskQueue: TASK_QUEUES.main, workflowId: runId, args: [{ configPath, runId } satisfies TrainRunInput] }), { onRetry: retryNote });
      const records = await readStepRecords(new LocalArtifactStore(), runId);
      const finalVersion = finalVersionOf(records);
      log(`${runId}: trained to v${finalVersion}; EvalSweep of v${finalVersion} on the held-out tasks x k=${o.k}`);
      await evaluate(client, { runId, version: finalVersion, evalFile, k: o.k, concurrency: o.evalConcurrency, workflowId: `${runId}-eval` });
      return { ...armResult(a.arm, a.seed, runId, records, splitOf, o.k), evalWorkflowId: `${runId}-eval` };
    };
    // Waves of parallelRuns runs; with lr-0 control runs, a seed's two arms go in the same wave (the same machine load).
    const runs: ArmRun[] = [];
    for (let i = 0; i < arms.length; i += o.parallelRuns) runs.push(...(await Promise.all(arms.slice(i, i + o.parallelRuns).map(runArm))));
    if (o.control === 'warm-start') runs.push({ ...warmStartControl(o, sft, splitOf), evalWorkflowId: controlEval });
    return { ...base, arms: runs, reports: await armReports(runs), wallS: Math.round((Date.now() - t0) / 1000) };
  } finally {
    await stopExtraTrainers(trainers);
    await close();
  }
}

/** The agent case's command line with every option spelled out, for BENCHMARKS.md. */
export function agentCommand(o: AgentLearnOptions, extra = ''): string {
  const nums = Object.entries(FLAGS).map(([name, { key }]) => `--${name} ${o[key]}`).join(' ');
  return `npm run bench:learn -- ${nums} --advantage ${o.advantage} --held-out-package ${o.heldOutPackage} --control ${o.control} --rubric ${o.rubric}` +
    (o.sftRun ? ` --sft-run ${o.sftRun}` : '') + (o.warmStep !== undefined ? ` --warm-step ${o.warmStep}` : '') + (o.resume ? ` --resume ${o.resume}` : '') + extra;
}
