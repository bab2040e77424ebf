/** A rollout's task: its id, its row (inline or from the task file), and where its repository comes from. */
import * as path from 'node:path';
import type { ParsedRolloutInput } from '../contracts/rollout';
import type { AcquireOptions } from '../sandbox/interface';
import { loadTask, resolveDataset } from '../tasks/load';
import type { Task } from '../tasks/schema';
import { TaskSetupError } from '../tasks/setupError';

type TaskField = ParsedRolloutInput['task'];

/** The row itself, or the row read from its task file (TaskSetupError when the id is not in it). */
export async function rolloutTask(task: TaskField, taskSetDir: string): Promise<Task> {
  return 'instance_id' in task
    ? (task as Task)
    : loadTask(resolveDataset((task as { datasetPath: string }).datasetPath, taskSetDir), (task as { instanceId: string }).instanceId);
}

/** Where the sandbox's repository comes from: a git snapshot in the task set, or an image that has it. */
export function sandboxSource(task: Task, taskSetDir: string): Pick<AcquireOptions, 'image' | 'repo' | 'imageRepo'> {
  const source = task.source;
  if (!source) {
    throw new TaskSetupError(`task "${task.instance_id}" has no source; add source: {type: "snapshot", repo_path: "repos/<name>.git"} or {type: "image", image: "..."}`);
  }
  if (source.type === 'image') return { image: source.image, imageRepo: { dir: source.repo_dir, baseCommit: task.base_commit } };
  return { repo: { hostPath: path.resolve(taskSetDir, source.repo_path), baseCommit: task.base_commit } };
}
