/**
 * How runs share workers (docs/architecture.md "Runs share workers fairly"): the
 * Temporal priority and fairness keys that rollout, eval and trainer activities
 * carry. Pure, so workflow code can import it.
 *
 * - The fairness key is the run id: the server dispatches a task queue's backlog
 *   to each key in proportion to its weight, so two runs that share rollout
 *   workers each get their share whatever their sizes (max_concurrent_rollouts,
 *   batch size).
 * - The priority key orders backlogs before fairness does: a smaller key goes
 *   first. Training uses the server's default (3), so a run started before these
 *   keys existed is training's peer; eval sweeps use 4 and take only the slots
 *   training leaves.
 */
import type { Priority } from '@temporalio/common';

/** Training rollouts, the step's child workflow and the trainer: the server's default priority. */
export const TRAINING_PRIORITY = 3;
/** Eval sweeps: below training, so a sweep never delays a step's rollouts by more than the slots it already holds. */
export const EVAL_PRIORITY = 4;

/** `[orchestrator] fairness_weight` bounds: Temporal clamps weights to [0.001, 1000]; ours stay well inside. */
export const FAIRNESS_WEIGHT_MIN = 0.01;
export const FAIRNESS_WEIGHT_MAX = 100;
export const DEFAULT_FAIRNESS_WEIGHT = 1;

/** Temporal's limit on a fairness key. */
export const FAIRNESS_KEY_MAX_BYTES = 64;

/** FNV-1a, 32 bits, as 8 hex digits: deterministic, so a workflow may call it. */
function fnv1a(s: string): string {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h.toString(16).padStart(8, '0');
}

function utf8Length(s: string): number {
  let n = 0;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    n += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  }
  return n;
}

/**
 * The run's fairness key: the run id itself, or for an id over Temporal's 64 bytes its
 * first 40 characters and a hash of the whole id (still one key per run).
 */
export function fairnessKeyOf(runId: string): string {
  if (utf8Length(runId) <= FAIRNESS_KEY_MAX_BYTES) return runId;
  return `${runId.replace(/[^\x20-\x7e]/g, '_').slice(0, 40)}~${fnv1a(runId)}`;
}

/** Priority and fairness of a run's training work: rollouts, the StepRollouts child and the trainer's activities. */
export function trainingPriority(runId: string, weight: number = DEFAULT_FAIRNESS_WEIGHT): Priority {
  return { priorityKey: TRAINING_PRIORITY, fairnessKey: fairnessKeyOf(runId), fairnessWeight: weight };
}

/** Priority and fairness of an eval sweep's rollouts: the run's key, below training by priority. */
export function evalPriority(runId: string, weight: number = DEFAULT_FAIRNESS_WEIGHT): Priority {
  return { priorityKey: EVAL_PRIORITY, fairnessKey: fairnessKeyOf(runId), fairnessWeight: weight };
}
