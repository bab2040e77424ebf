import { shellTool } from '../shell';
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
  tools: [shellTool('shell', 'Run a bash command in the repository root and see its output.'), applyPatchTool],
  async finalize(ctx) {
    return { diff: await ctx.sandbox.diff() };
  },
  needsTests: true,
  rubric: codeRepairRubric,
};
