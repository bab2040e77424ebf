import type { RunConfig } from '../config/schema';
import { checkEvalSection } from '../evals/tasksets';
import { fail, ok, warn, type CheckLine } from './types';

/**
 * [eval]: with an in-run eval cadence, its held-out task set loads and validates as every sweep will load
 * it (src/evals/tasksets.ts), and the cadence can fire within the run's steps. Nothing when it is off.
 */
export async function checkEval(c: RunConfig): Promise<CheckLine[]> {
  const e = c.eval;
  const found = await checkEvalSection(e);
  if (!found) return [];
  if ('problem' in found) return [fail('eval', found.problem)];
  const lines = [ok('eval', `eval.every_steps = ${e.every_steps}: a sweep of ${found.tasks} tasks (${found.file}) x k = ${e.k} after every ${e.every_steps} steps, below training by priority`)];
  if (e.every_steps > c.orchestrator.max_steps) {
    lines.push(warn('eval', `eval.every_steps: ${e.every_steps} is more than orchestrator.max_steps = ${c.orchestrator.max_steps}, so no sweep runs in this run. ` +
      'Fix: lower eval.every_steps, or evaluate afterwards with `ratchet eval --run <run>`'));
  }
  return lines;
}
