/**
 * The scripted code-repair solver: the steps the task's gold patch implies, made with the
 * environment's own tools on the real sandbox (src/envs/code-repair): find the function the
 * patch changes, view that part of the file, make each hunk's edit with `apply_patch`
 * (search = the hunk's old lines, replace = its new lines), run the failing tests, and
 * answer with a summary. Every tool output is real; a step that fails there (a search that
 * no longer matches once) leaves the episode unsolved, and the reward filter drops it
 * (src/sft/demos.ts).
 */
import type { ModelClient } from '../../agent/model';
import { shq } from '../../envs/sandbox';
import { pytestCommand } from '../../envs/tests-run';
import type { Task } from '../../tasks/schema';
import { fixSummary, headerName, parseGoldPatch, type FilePatch } from './goldPatch';
import { playPlan, type PlannedCall } from './plan';

/** Lines shown around the changes when the file is viewed. */
const VIEW_MARGIN = 3;
const VIEW_MAX_LINES = 120;

/** The lines of `f` its hunks touch, with a margin: [first, last] (1-based), at most VIEW_MAX_LINES. */
export function viewRange(f: FilePatch): [number, number] {
  const first = Math.max(1, Math.min(...f.hunks.map((h) => h.oldStart)) - VIEW_MARGIN);
  const last = Math.max(...f.hunks.map((h) => h.oldStart + h.oldLines.length - 1)) + VIEW_MARGIN;
  return [first, Math.min(last, first + VIEW_MAX_LINES - 1)];
}

export function codeRepairPlan(task: Pick<Task, 'patch' | 'FAIL_TO_PASS' | 'test_cmd'>): { plan: PlannedCall[]; final: string } {
  const files = parseGoldPatch(task.patch);
  const plan: PlannedCall[] = [];
  for (const f of files) {
    const name = f.hunks.map(headerName).find((n) => n !== undefined);
    // Where the code is: its definition, as a person would search for it (grep: in every sandbox image).
    if (name) plan.push({ tool: 'shell', args: { command: `grep -rnE "^\\s*(async\\s+)?(def|class)\\s+${name}\\b" --include='*.py' . | head -20` } });
    const [a, b] = viewRange(f);
    plan.push({ tool: 'shell', args: { command: `sed -n '${a},${b}p' ${shq(f.path)}` } });
    for (const h of f.hunks) plan.push({ tool: 'apply_patch', args: { path: f.path, search: h.oldLines.join('\n'), replace: h.newLines.join('\n') } });
  }
  if (task.FAIL_TO_PASS.length) plan.push({ tool: 'shell', args: { command: pytestCommand(task.test_cmd, task.FAIL_TO_PASS, ['-q']) } });
  return { plan, final: fixSummary(files) };
}

export function codeRepairSolver(task: Task): ModelClient {
  const { plan, final } = codeRepairPlan(task);
  return playPlan(plan, final);
}
