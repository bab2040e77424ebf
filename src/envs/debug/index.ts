import type { Environment } from '../types';
import { debugRubric } from './rewards';
import { debugTools } from './tools';

/** Debugging (seed 003): read code, run the tests, step through them in pdb, rewrite lines. */
export const debug: Environment = {
  id: 'debug',
  systemPrompt: [
    'You are debugging a failing test in the repository. Tools: `listdir`, `view` (numbered lines),',
    '`eval` (run the tests), `pdb` (one debugger command per call, on the failing test), `rewrite` (replace a line range).',
    'Find the bug, fix it with `rewrite`, check with `eval`, then reply with a short summary and no tool call.',
  ].join('\n'),
  userPrompt: (task) => `Repository: ${task.repo}\n\nIssue:\n${task.problem_statement}\n\nFailing tests: ${task.FAIL_TO_PASS.join(', ')}`,
  tools: debugTools,
  async finalize(ctx) {
    return { diff: await ctx.sandbox.diff() };
  },
  needsTests: true,
  rubric: debugRubric,
};
