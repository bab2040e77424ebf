/**
 * The figures of bench:learn's multi-turn case (issue 28), pure: what an agent episode
 * did (turns, tool calls, whether it searched before answering; its file precision, recall
 * and F1 are the swe-grep rubric's own components), the held-out split (a package no training task came
 * from, plus random rows of the training packages), and the paired per-task difference
 * between the RL-from-SFT arm and its lr-0 control, with a bootstrap 95% interval.
 */
import type { Trajectory } from '../contracts/trajectory';
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
