import { shellTool } from '../shell';
import { DEMO_ISSUE, DEMO_REPO, demonstration } from '../demonstration';
import { hasFailingTests } from '../tests';
import type { Environment } from '../types';
import { applyPatchTool } from './apply-patch';
import { codeRepairRubric } from './rewards';

/** Code repair (seed 004, Nano): a shell and a search/replace editor; the answer is the work tree's diff. */
export const codeRepair: Environment = {
  id: 'code-repair',
  systemPrompt: [
    'You are a software engineer fixing a bug in the repository (your working directory).',
    'Use `shell` to inspect code (rg, sed -n, ls; do not cat whole large files) and `apply_patch` to edit:',
    'its `search` text must match the file exactly once. When the fix is in place, reply with a short summary and no tool call.',
  ].join('\n'),
  userPrompt: (task) => `Repository: ${task.repo}\n\nIssue:\n${task.problem_statement}\n\nFix the bug.`,
  demonstration: demonstration(`Repository: ${DEMO_REPO}\n\nIssue:\n${DEMO_ISSUE}\n\nFix the bug.`, [
    { tool: 'shell', args: { command: 'rg -n -A2 "def add" --type py' }, output: 'calc/ops.py:4:def add(a, b):\ncalc/ops.py-5-    return a - b\n\n[exit code 0]' },
    { tool: 'apply_patch', args: { path: 'calc/ops.py', search: '    return a - b', replace: '    return a + b' }, output: 'Patched calc/ops.py: replaced 1 line(s) with 1 line(s).' },
  ], 'Fixed: add() subtracted instead of adding.'),
  tools: [shellTool('shell', 'Run a bash command in the repository root and see its output.'), applyPatchTool],
  async finalize(ctx) {
    return { diff: await ctx.sandbox.diff() };
  },
  needsTests: true,
  rubric: codeRepairRubric,
  // Solved: every FAIL_TO_PASS test passes and no PASS_TO_PASS test broke.
  evalMetrics: { solved: { reward: 'tests_pass', min: 1, applies: hasFailingTests } },
};
