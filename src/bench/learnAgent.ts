/**
 * The figures of bench:learn's multi-turn case (issue 28), pure: what an agent episode
 * did (turns, tool calls, whether it searched before answering; its file precision, recall
 * and F1 are the swe-grep rubric's own components), the held-out split (a package no training task came
 * from, plus random rows of the training packages), and the paired per-task difference
 * between the RL-from-SFT arm and its lr-0 control, with a bootstrap 95% interval.
 */
import type { Trajectory } from '../contracts/trajectory';
import { isInformative } from '../samples/groupSignal';
import { mulberry32 } from '../shared/random';
import { bootstrapCi } from './learn';

export interface EpisodeBehaviour {
  turns: number;
  toolCalls: number;
  /** A search tool ran before the answer tool (or the episode searched and never answered: false). */
  searchedBeforeAnswer: boolean;
  answered: boolean;
}

/** What one episode did; `answerTool` ends it, every other tool call counts as a search. */
export function episodeBehaviour(t: Pick<Trajectory, 'messages' | 'turns'>, answerTool = 'result'): EpisodeBehaviour {
  const calls = t.messages.filter((m) => m.role === 'assistant').flatMap((m) => m.tool_calls ?? []).map((c) => c.function.name);
  const answerAt = calls.indexOf(answerTool);
  return {
    turns: t.turns.length,
    toolCalls: calls.length,
    answered: answerAt >= 0,
    searchedBeforeAnswer: answerAt > 0 && calls.slice(0, answerAt).some((n) => n !== answerTool),
  };
}

/** A seeded shuffle (a random key per item, drawn in order, then sorted): the same seed gives the same order. */
export function shuffled<T>(xs: readonly T[], seed: number): T[] {
  const rand = mulberry32(seed);
  return xs.map((x, i) => ({ x, k: rand(), i })).sort((a, b) => a.k - b.k || a.i - b.i).map((e) => e.x);
}

export interface HeldOutSplit<T> {
  train: T[];
  /** Every task of the held-out package: no training task came from it. */
  unseenPackage: T[];
  /** Rows of the training packages, chosen at random (seeded), never trained on. */
  randomRows: T[];
}

/**
 * Splits tasks for the bench: `heldOutPackage`'s tasks are all held out; of the rest,
 * `randomRows` are drawn at random (seeded) and held out; the remainder trains (and only
 * the remainder gets SFT demonstrations).
 */
export function heldOutSplit<T extends { repo: string }>(tasks: readonly T[], heldOutPackage: string, randomRows: number, seed: number): HeldOutSplit<T> {
  const unseenPackage = tasks.filter((t) => t.repo === heldOutPackage);
  if (unseenPackage.length === 0) {
    throw new Error(`no task comes from package "${heldOutPackage}" (have: ${[...new Set(tasks.map((t) => t.repo))].join(', ')}); generate one with taskgen`);
  }
  const rest = tasks.filter((t) => t.repo !== heldOutPackage);
  const n = Math.min(randomRows, Math.max(0, rest.length - 1));
  const held = new Set(shuffled(rest.map((_, i) => i), seed).slice(0, n));
  return { train: rest.filter((_, i) => !held.has(i)), unseenPackage, randomRows: rest.filter((_, i) => held.has(i)) };
}

/**
 * The paired per-task difference run − control: for each task both arms evaluated, the mean
 * over the arm's seeds (and samples) of `run` minus that of `control`; then the mean of those
 * differences over tasks, with a bootstrap 95% interval. Pairing by task removes the task
 * difficulty from the comparison; tasks one arm lacks are left out and counted.
 */
export function pairedDifference(run: ReadonlyMap<string, number[]>, control: ReadonlyMap<string, number[]>, seed = 1): {
  mean: number; lo: number; hi: number; tasks: number; unpaired: number;
} {
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  const diffs: number[] = [];
  let unpaired = 0;
  for (const [task, r] of [...run.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
    const c = control.get(task);
    if (!c?.length || !r.length) { unpaired++; continue; }
    diffs.push(mean(r) - mean(c));
  }
  unpaired += [...control.keys()].filter((k) => !run.has(k)).length;
  return { ...bootstrapCi(diffs, 2000, seed), tasks: diffs.length, unpaired };
}

/**
 * The bench's task sets (issue 38), each disjoint from the others: of the training packages, `evalRandom`
 * random rows are held out (the primary split), the rest is cut in two, the tasks the scripted solver
 * demonstrates and the RL pool, so RL never trains on a task SFT saw; `evalUnseen` tasks of the held-out
 * package are the secondary split (no demonstration or RL task came from it).
 */
export interface AgentSplit<T> {
  demo: T[];
  rl: T[];
  /** Primary held out: random rows of the training packages. */
  random: T[];
  /** Secondary held out: tasks of the package nothing trained on. */
  unseen: T[];
}

export function agentSplit<T extends { repo: string; instance_id: string }>(tasks: readonly T[], o: {
  heldOutPackage: string; evalRandom: number; evalUnseen: number; demoTasks: number; seed: number;
}): AgentSplit<T> {
  const s = heldOutSplit(tasks, o.heldOutPackage, o.evalRandom, o.seed);
  const train = shuffled(s.train, o.seed + 2);
  if (train.length < o.demoTasks + 2) {
    throw new Error(`${train.length} training tasks after holding out ${s.randomRows.length} rows cannot give ${o.demoTasks} demonstration tasks and an RL pool. ` +
      'Fix: lower --demos or --eval-random, or generate more tasks (taskgen)');
  }
  const split = { demo: train.slice(0, o.demoTasks), rl: train.slice(o.demoTasks), random: s.randomRows, unseen: shuffled(s.unseenPackage, o.seed + 1).slice(0, o.evalUnseen) };
  assertDisjoint(split);
  return split;
}

/** Throws, naming the task and both sets, if any task id is in two of the sets. */
export function assertDisjoint(sets: Record<string, readonly { instance_id: string }[]>): void {
  const seen = new Map<string, string>();
  for (const [name, xs] of Object.entries(sets)) {
    for (const t of xs) {
      const other = seen.get(t.instance_id);
      if (other !== undefined) throw new Error(`task ${t.instance_id} is in both the ${other} and the ${name} tasks: the bench's sets must be disjoint`);
      seen.set(t.instance_id, name);
    }
  }
}

/**
 * The swe-grep rubric as file F1 alone: every weighted reward at 0, `file_f1` at 1. A wrong answer and
 * silence (no answer: no predicted file) both score 0, a right one 1, a partly right one its F1, so no
 * group is informative on wrong-against-silent alone (the first bench's rubric ranked a wrong answer
 * above silence, and the gradient taught "answer sooner").
 */
export function fileF1Weights(rubric: readonly { name: string; weight: number }[]): Record<string, number> {
  if (!rubric.some((r) => r.name === 'file_f1')) throw new Error('the rubric has no file_f1 reward: the file_f1 preset is for swe-grep');
  return Object.fromEntries(rubric.filter((r) => r.weight !== 0 || r.name === 'file_f1').map((r) => [r.name, r.name === 'file_f1' ? 1 : 0]));
}

/** The pre-flight's verdict: can RL from this warm start get a signal on its pool? */
export interface Preflight {
  episodes: number;
  passed: number;
  passRate: number;
  band: [number, number];
  passReward: number;
  /** Tasks sampled, and those whose samples did not all score alike (a group of them has advantages). */
  tasks: number;
  informativeTasks: number;
  /** The share of tasks that must be informative. */
  minInformative: number;
  signal: boolean;
  /** Why not, where there is no signal. */
  reason?: string;
}

/**
 * A group has advantages only when its samples differ, so what the pre-flight must see is variance
 * within a task, not the pass rate across tasks: a warm start that solves half the tasks every time
 * and the other half never has a pass rate of 0.5 and no informative group at all (the first full run
 * of this bench: 3 informative groups of 44, identical completions within each group). Each task is
 * sampled `k` times (the run's group size); the verdict needs the pooled pass rate inside the band and
 * at least `minInformative` of the tasks with samples that do not all score alike.
 */
export function preflightDecision(byTask: readonly (readonly number[])[], passReward: number, band: [number, number], minInformative: number): Preflight {
  if (!(band[0] >= 0 && band[0] <= band[1] && band[1] <= 1)) throw new Error(`pre-flight band [${band.join(', ')}] is not 0 <= lo <= hi <= 1`);
  const rewards = byTask.flat();
  const passed = rewards.filter((r) => r >= passReward).length;
  const passRate = rewards.length === 0 ? 0 : passed / rewards.length;
  // The same test the run's difficulty filter applies to a group.
  const informativeTasks = byTask.filter(isInformative).length;
  const base = { episodes: rewards.length, passed, passRate, band, passReward, tasks: byTask.length, informativeTasks, minInformative };
  if (rewards.length === 0) return { ...base, signal: false, reason: 'the pre-flight scored no episode' };
  if (byTask.some((g) => g.length < 2)) return { ...base, signal: false, reason: 'a task was sampled once: within-task variance needs k >= 2 (the run\'s group size). Fix: --preflight-k' };
  if (passRate < band[0]) return { ...base, signal: false, reason: `the warm start passes ${passed} of ${rewards.length} RL-pool episodes, below ${band[0]}: nearly every group would fail alike` };
  if (passRate > band[1]) return { ...base, signal: false, reason: `the warm start passes ${passed} of ${rewards.length} RL-pool episodes, above ${band[1]}: nearly every group would pass alike` };
  if (informativeTasks < minInformative * byTask.length) {
    return { ...base, signal: false, reason: `${informativeTasks} of ${byTask.length} tasks had samples that scored differently, below ${minInformative}: ` +
      'the warm start answers each task the same way every time, so nearly every group would score alike' };
  }
  return { ...base, signal: true };
}

/**
 * The mean negative log-likelihood of the trained tokens (mask 1) of one sequence, from vLLM's prompt
 * logprobs (`prompt_logprobs`: position i holds {id: {logprob}} for the prompt's token i; position 0 is null).
 */
export function maskedNll(ids: readonly number[], mask: readonly number[], promptLogprobs: readonly (Record<string, { logprob: number }> | null)[]): { sum: number; tokens: number } {
  let sum = 0;
  let tokens = 0;
  for (let i = 1; i < ids.length; i++) {
    if (!mask[i]) continue;
    const lp = promptLogprobs[i]?.[String(ids[i])]?.logprob;
    if (lp === undefined) throw new Error(`no prompt logprob for token ${i} (id ${ids[i]}): the server did not score the sequence`);
    sum -= lp;
    tokens++;
  }
  return { sum, tokens };
}

/**
 * Early stopping on the held-out demonstration loss: the best step so far, and whether `patience`
 * steps have passed since it without a lower loss (then the run stops; the warm start is the best step).
 */
export function sftStopping(losses: readonly number[], patience: number): { best: number; stop: boolean } {
  let best = -1;
  for (let i = 0; i < losses.length; i++) if (best < 0 || losses[i]! < losses[best]!) best = i;
  return { best, stop: best >= 0 && losses.length - 1 - best >= patience };
}
