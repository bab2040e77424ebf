import { fractionPassed } from '../tests';
import type { RewardFn, ScoreInput } from '../types';

/** Debugging rewards (seed 003): the failing tests pass, and nothing that passed breaks. */
export function fixedTests(i: ScoreInput): number {
  const t = i.tests;
  if (!t || !t.ran || !t.applied) return 0;
  if (fractionPassed(i.task.PASS_TO_PASS, t.results) < 1) return 0;
  return fractionPassed(i.task.FAIL_TO_PASS, t.results);
}

export const debugRubric: RewardFn[] = [
  { name: 'fail_to_pass', weight: 1.0, fn: fixedTests },
  { name: 'pass_to_pass', weight: 0, fn: (i) => (i.tests?.ran && i.tests.applied ? fractionPassed(i.task.PASS_TO_PASS, i.tests.results) : 0) },
  { name: 'used_debugger', weight: 0, fn: (i) => ((i.stats.tools_used.pdb ?? 0) > 0 ? 1 : 0) },
];
