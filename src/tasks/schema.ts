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

/**
 * Size limits per field. The problem statement goes whole into every model
 * request and every trajectory, so it is bounded by what a prompt can hold
 * (100k characters is ~25k tokens; SWE-bench's longest are ~30k characters);
 * the rest by what a real task needs, with room to spare.
 */
export const TASK_LIMITS = {
  id: 256,
  problem_statement: 100_000,
  patch: 1_000_000,
  test_ids: 10_000,
  test_id: 2_000,
  test_cmd: 2_000,
  files: 1_000,
  /** A whole row, extra fields included (JSONL line or Parquet row as JSON). */
  row_bytes: 4_000_000,
} as const;

const Id = z.string().min(1).max(TASK_LIMITS.id);
const BoundedTestIds = TestIds.pipe(z.array(z.string().max(TASK_LIMITS.test_id)).max(TASK_LIMITS.test_ids));
const FileList = StringList.pipe(z.array(z.string().max(4096)).max(TASK_LIMITS.files));

/** Why a repository-relative path would leave the repository, or undefined when it stays inside. */
export function pathEscapes(p: string): string | undefined {
  if (p === '' || p === '/dev/null') return undefined;
  if (p.includes('\0') || p.includes('\u0000')) return 'contains a NUL byte';
  if (p.startsWith('/') || /^[A-Za-z]:[\\/]/.test(p)) return 'is absolute';
  if (p.split(/[\\/]/).includes('..')) return 'contains ".."';
  if (p.split(/[\\/]/)[0] === '.git') return 'is inside .git';
  return undefined;
}

/** Every path a unified git diff names: headers, ---/+++ lines, renames and copies. */
export function pathsInPatch(patch: string): string[] {
  const out: string[] = [];
  for (const line of patch.split('\n')) {
    let m = /^diff --git a\/(.+?) b\/(.+)$/.exec(line);
    if (m) { out.push(m[1]!, m[2]!); continue; }
    m = /^(?:---|\+\+\+) (?:[ab]\/)?(.+?)(?:\t.*)?$/.exec(line);
    if (m) { out.push(m[1]!); continue; }
    m = /^(?:rename|copy) (?:from|to) (.+)$/.exec(line);
    if (m) out.push(m[1]!);
  }
  return out;
}

export const Task = z.object({
  instance_id: Id,
  repo: Id,
  version: z.string().max(TASK_LIMITS.id).optional(),
  base_commit: Id,
  problem_statement: z.string().max(TASK_LIMITS.problem_statement, `is longer than ${TASK_LIMITS.problem_statement} characters: it is sent whole with every model request; shorten it`),
  /** The gold fix as a unified git diff. */
  patch: z.string().max(TASK_LIMITS.patch),
  test_patch: z.string().max(TASK_LIMITS.patch).default(''),
  FAIL_TO_PASS: BoundedTestIds,
  PASS_TO_PASS: BoundedTestIds.default([]),
  /** Files the gold patch changes; derived from `patch` when absent. */
  gold_files: FileList.optional(),
  /** `path::function` (or bare function names) the gold patch changes. */
  gold_functions: FileList.optional(),
  mutation: z.object({ kind: z.string(), file: z.string(), line: z.number().int() }).passthrough().optional(),
  /** Command that runs pytest in /work/repo; test ids are appended. */
  test_cmd: z.string().max(TASK_LIMITS.test_cmd).default('python3 -m pytest'),
  source: TaskSource.optional(),
  split: z.string().optional(),
  created_by: z.string().optional(),
}).passthrough().superRefine((t, ctx) => {
  // Paths the gold patches, gold files and the mutation name are applied and scored inside the repository.
  const check = (field: string, paths: string[]) => {
    for (const p of paths) {
      const why = pathEscapes(p);
      if (why) {
        ctx.addIssue({ code: z.ZodIssueCode.custom, path: [field], message: `path "${p.slice(0, 200)}" ${why}: paths must stay inside the repository` });
        return;
      }
    }
  };
  check('patch', pathsInPatch(t.patch));
  check('test_patch', pathsInPatch(t.test_patch));
  check('gold_files', t.gold_files ?? []);
  if (t.mutation) check('mutation', [t.mutation.file]);
});
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
