/**
 * A task that cannot be set up, the same way on every attempt: its row is missing from the
 * task file, its repository snapshot lacks the base commit, or the environment's setup
 * failed on it. One rollout's problem, not the run's: the rollout activity records it as a
 * trajectory with stop_reason `setup_error` and the batch builder drops it.
 */
export class TaskSetupError extends Error {
  override readonly name = 'TaskSetupError';
}

export function isTaskSetupError(err: unknown): err is TaskSetupError {
  // By name too: the class may come from another copy of the module (jest module registries).
  return err instanceof TaskSetupError || (err instanceof Error && err.name === 'TaskSetupError');
}
