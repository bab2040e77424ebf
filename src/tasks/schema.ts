import { z } from 'zod';

/**
 * A task row: a superset of the SWE-bench schema, so public sets (SWE-bench
 * Lite, SWE-Gym, SWE-smith) load unchanged, plus the fields our own task
 * generator adds (source, gold files/functions, mutation, test command).
 * Pure: workflow code may import it.
 */

/** Public SWE-bench rows store test id lists as JSON-encoded strings; ours as arrays. */
const TestIds = z.preprocess((value, ctx) => {
  if (typeof value !== 'string') return value;
  try {
    return JSON.parse(value) as unknown;
  } catch {
    ctx.addIssue({ code: z.ZodIssueCode.custom, message: 'is a string but not a JSON array of test ids; write a JSON array like ["tests/test_x.py::test_y"]' });
    return z.NEVER;
  }
}, z.array(z.string()));

const StringList = z.preprocess(
  (value) => (typeof value === 'string' && value.trim().startsWith('[') ? JSON.parse(value) as unknown : value),
  z.array(z.string()),
);

export const TaskSource = z.discriminatedUnion('type', [
  /** A bare git repository in the task set dir, checked out at base_commit. */
  z.object({ type: z.literal('snapshot'), repo_path: z.string().min(1) }),
  /**
   * A prebuilt image (SWE-bench / SWE-Gym style) holding the repository, with its
   * .git, at repo_dir (SWE-bench's /testbed by default). The sandbox copies it into
   * its writable work area (/work/repo, sized by sandbox.disk_mb) at base_commit.
   */
  z.object({
    type: z.literal('image'),
    image: z.string().min(1),
    repo_dir: z.string().regex(/^\/[^\0]*$/, 'must be an absolute path inside the image').default('/testbed'),
  }),
]);
export type TaskSource = z.infer<typeof TaskSource>;

export const Task = z.object({
  instance_id: z.string().min(1),
  repo: z.string().min(1),
  version: z.string().optional(),
  base_commit: z.string().min(1),
  problem_statement: z.string(),
  /** The gold fix as a unified git diff. */
  patch: z.string(),
  test_patch: z.string().default(''),
  FAIL_TO_PASS: TestIds,
  PASS_TO_PASS: TestIds.default([]),
  /** Files the gold patch changes; derived from `patch` when absent. */
  gold_files: StringList.optional(),
  /** `path::function` (or bare function names) the gold patch changes. */
  gold_functions: StringList.optional(),
  mutation: z.object({ kind: z.string(), file: z.string(), line: z.number().int() }).passthrough().optional(),
  /** Command that runs pytest in /work/repo; test ids are appended. */
  test_cmd: z.string().default('python3 -m pytest'),
  source: TaskSource.optional(),
  split: z.string().optional(),
  created_by: z.string().optional(),
}).passthrough();
export type Task = z.infer<typeof Task>;

/** Files a unified git diff touches (b/ side, or a/ side for deletions). */
export function filesInPatch(patch: string): string[] {
  const files = new Set<string>();
  for (const line of patch.split('\n')) {
    const m = /^diff --git a\/(\S+) b\/(\S+)/.exec(line);
    if (m) files.add(m[2] as string);
  }
  if (files.size === 0) {
    for (const line of patch.split('\n')) {
      const m = /^\+\+\+ b\/(\S+)/.exec(line);
      if (m) files.add(m[1] as string);
    }
  }
  return [...files];
}

export function goldFiles(task: Task): string[] {
  return task.gold_files && task.gold_files.length > 0 ? task.gold_files : filesInPatch(task.patch);
}
