/**
 * Per-task pass-rate pools (pure): the run's count of each task's rollouts and passes, and the
 * sampling weight they give it. A task the policy always fails or always passes teaches nothing
 * in a group (every advantage 0); one it passes sometimes does. Weight 4p(1-p) (1 at p = 0.5),
 * never below `floor`, so a task's rate can still change; a task never rolled out weighs 1 (explore).
 */

export const TASK_POOL_FORMAT = 'ratchet.task-pool/v1';

export interface TaskPool {
  format: typeof TASK_POOL_FORMAT;
  /** The last step whose rollouts it counts. */
  step: number;
  /** By instance id: rollouts scored and those whose reward reached pass_reward. */
  tasks: Record<string, { rollouts: number; passes: number }>;
}

export function emptyPool(): TaskPool {
  return { format: TASK_POOL_FORMAT, step: -1, tasks: {} };
}

/** The pool after a step's rollouts; unscored ones (infra_error, setup_error) say nothing about the task. */
export function updatePool(prev: TaskPool, step: number, rollouts: readonly { task_id: string; reward: number; stop_reason: string }[], passReward: number): TaskPool {
  const tasks = { ...prev.tasks };
  for (const r of rollouts) {
    if (r.stop_reason === 'infra_error' || r.stop_reason === 'setup_error') continue;
    const t = tasks[r.task_id] ?? { rollouts: 0, passes: 0 };
    tasks[r.task_id] = { rollouts: t.rollouts + 1, passes: t.passes + (r.reward >= passReward ? 1 : 0) };
  }
  // Sorted keys: the same counts give the same bytes (the artifact is keyed by content).
  return { format: TASK_POOL_FORMAT, step, tasks: Object.fromEntries(Object.keys(tasks).sort().map((k) => [k, tasks[k]!])) };
}

export function poolWeight(entry: { rollouts: number; passes: number } | undefined, floor: number): number {
  if (!entry || entry.rollouts === 0) return 1;
  const p = entry.passes / entry.rollouts;
  return Math.max(4 * p * (1 - p), floor);
}

/** Tasks seen, and those passed sometimes (0 < p < 1): for the step record and logs. */
export function poolCounts(pool: TaskPool): { tasks: number; sometimes: number } {
  const entries = Object.values(pool.tasks);
  return { tasks: entries.length, sometimes: entries.filter((t) => t.passes > 0 && t.passes < t.rollouts).length };
}
