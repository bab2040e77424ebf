/**
 * The scripted debug solver: the steps the task's gold patch implies, made with the debug
 * environment's own tools on the real sandbox (src/envs/debug): run the tests (`eval`) and see
 * them fail, `view` the lines the patch changes, `rewrite` each changed span (from the bottom of
 * the file up, so the line numbers of the spans above stay right), `eval` again, and answer with
 * a summary. Every tool output is real; an episode whose tests still fail is dropped by the
 * reward filter (src/sft/demos.ts).
 */
import type { ModelClient } from '../../agent/model';
import type { Task } from '../../tasks/schema';
import { viewRange } from './codeRepair';
import { fixSummary, parseGoldPatch, type Hunk } from './goldPatch';
import { playPlan, type PlannedCall } from './plan';

/**
 * The lines one `rewrite` replaces. `rewrite` reads its content as lines and drops one trailing
 * newline, so new lines that end in a blank line would lose it: the span then takes in the
 * context line after it (or, at the end of the file, the one before it) on both sides.
 */
export function rewriteSpan(h: Hunk): Hunk['change'] {
  const { start, removed, added } = h.change;
  if (added.length === 0 || added[added.length - 1] !== '') return h.change;
  const at = start - h.oldStart;
  const next = h.oldLines[at + removed.length];
  if (next !== undefined) return { start, removed: [...removed, next], added: [...added, next] };
  const prev = h.oldLines[at - 1];
  if (prev !== undefined) return { start: start - 1, removed: [prev, ...removed], added: [prev, ...added] };
  return h.change;
}

export function debugPlan(task: Pick<Task, 'patch'>): { plan: PlannedCall[]; final: string } {
  const files = parseGoldPatch(task.patch);
  const plan: PlannedCall[] = [{ tool: 'eval', args: {} }];
  for (const f of files) {
    const [start, end] = viewRange(f);
    plan.push({ tool: 'view', args: { path: f.path, start, end } });
    for (const h of [...f.hunks].sort((x, y) => y.change.start - x.change.start)) {
      const { start: s, removed, added } = rewriteSpan(h);
      // end = start - 1 inserts before `start` (a hunk that only adds lines).
      plan.push({ tool: 'rewrite', args: { path: f.path, start: s, end: s + removed.length - 1, content: added.join('\n') } });
    }
  }
  plan.push({ tool: 'eval', args: {} });
  return { plan, final: fixSummary(files) };
}

export function debugSolver(task: Task): ModelClient {
  const { plan, final } = debugPlan(task);
  return playPlan(plan, final);
}
