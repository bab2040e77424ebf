import { DEMO_ISSUE, DEMO_REPO, demonstration } from '../demonstration';
import { hasFailingTests } from '../tests';
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
  demonstration: demonstration(`Repository: ${DEMO_REPO}\n\nIssue:\n${DEMO_ISSUE}\n\nFailing tests: tests/test_ops.py::test_add`, [
    { tool: 'view', args: { path: 'calc/ops.py', start: 1, end: 6 }, output: '    1  \"\"\"Arithmetic.\"\"\"\n    2  \n    3  \n    4  def add(a, b):\n    5      return a - b\n    6  ' },
    { tool: 'rewrite', args: { path: 'calc/ops.py', start: 5, end: 5, content: '    return a + b' }, output: 'Rewrote calc/ops.py lines 5-5. Now:\n    3  \n    4  def add(a, b):\n    5      return a + b\n    6  ' },
    { tool: 'eval', args: {}, output: 'tests/test_ops.py .   [100%]\n1 passed in 0.01s\n\n[exit code 0]' },
  ], 'Fixed: add() subtracted instead of adding.'),
  tools: debugTools,
  async finalize(ctx) {
    return { diff: await ctx.sandbox.diff() };
  },
  needsTests: true,
  rubric: debugRubric,
  // fail_to_pass is 1 only when every FAIL_TO_PASS test passes and no PASS_TO_PASS test broke.
  evalMetrics: { solved: { reward: 'fail_to_pass', min: 1, applies: hasFailingTests } },
};
