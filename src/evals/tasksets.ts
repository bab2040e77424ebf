/** Eval task sets: a name under the task dir or a path, validated and hashed before a sweep. */
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { sha256 } from '../artifacts/store';
import { paths, resolveConfigPath } from '../shared/paths';
import type { EvalSection } from '../config/schema';
import { MAX_EPISODES_PER_VERSION } from '../config/evalBounds';
import { loadTasks, TaskLoadError } from '../tasks/load';
import type { Task } from '../tasks/schema';

/** `heldout` → <tasks>/heldout.jsonl; anything with a slash or an extension is a path. */
export function resolveTaskset(taskset: string, taskDir = paths.tasks()): { name: string; file: string } {
  if (taskset.includes('/') || /\.(jsonl|json|ndjson|parquet)$/i.test(taskset)) {
    const file = path.resolve(taskset);
    return { name: path.basename(file).replace(/\.[^.]+$/, ''), file };
  }
  return { name: taskset, file: path.join(taskDir, `${taskset}.jsonl`) };
}

/** Validates a task set for evaluation; a non-retryable failure names the file, rows and fix. */
export async function loadEvalTaskset(taskset: string): Promise<{ name: string; file: string; hash: string; tasks: Task[] }> {
  const { name, file } = resolveTaskset(taskset);
  let bytes: Buffer;
  try {
    bytes = await fs.readFile(file);
  } catch {
    throw ApplicationFailure.nonRetryable(`task set "${taskset}" not found: no file ${file}. ` +
      'Fix: generate it (bash infra/tasks.sh) or pass --taskset <path/to/tasks.jsonl>.', 'TaskSetNotFound');
  }
  let tasks: Task[];
  try {
    tasks = (await loadTasks(file)).tasks;
  } catch (err) {
    if (err instanceof TaskLoadError) throw ApplicationFailure.nonRetryable(`task set ${file} failed validation:\n${err.message}`, 'TaskSetInvalid');
    throw ApplicationFailure.nonRetryable(`task set ${file}: ${(err as Error).message}`, 'TaskSetInvalid');
  }
  if (tasks.length === 0) throw ApplicationFailure.nonRetryable(`task set ${file} has no tasks. Fix: point --taskset at a non-empty JSONL file.`, 'TaskSetInvalid');
  return { name, file, hash: sha256(bytes).slice(0, 16), tasks };
}

/** [eval] taskset as stored with the run: a name stays a name; a path resolves against the repository root, as config paths do. */
export function configTaskset(taskset: string): string {
  return taskset.includes('/') || /\.(jsonl|json|ndjson|parquet)$/i.test(taskset) ? resolveConfigPath(taskset) : taskset;
}

/**
 * The in-run eval cadence's task set, checked as its sweeps will load it: undefined when the cadence
 * is off; else the task set, or the problem, naming eval.taskset / eval.k, with the fix.
 */
export async function checkEvalSection(e: EvalSection): Promise<{ problem: string } | { name: string; file: string; tasks: number } | undefined> {
  if (e.every_steps === 0) return undefined;
  let ts: Awaited<ReturnType<typeof loadEvalTaskset>>;
  try {
    ts = await loadEvalTaskset(configTaskset(e.taskset));
  } catch (err) {
    return { problem: `eval.taskset: ${(err as Error).message.replace('or pass --taskset', 'or set eval.taskset to')} (eval.every_steps = ${e.every_steps} evaluates on it; 0 turns the cadence off)` };
  }
  if (ts.tasks.length * e.k > MAX_EPISODES_PER_VERSION) {
    return { problem: `eval.k: ${ts.tasks.length} tasks of ${ts.file} x k = ${e.k} = ${ts.tasks.length * e.k} episodes per sweep, over ${MAX_EPISODES_PER_VERSION}. Fix: lower eval.k or use a smaller eval.taskset` };
  }
  return { name: ts.name, file: ts.file, tasks: ts.tasks.length };
}
