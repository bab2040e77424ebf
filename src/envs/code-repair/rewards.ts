import { fractionPassed } from '../tests';
import type { RewardFn, ScoreInput } from '../types';
import { diffSimilarity } from './diff-similarity';

/**
 * Repair rewards (seed 004): similarity of the final diff to the gold patch,
 * and the tests: FAIL_TO_PASS pass with PASS_TO_PASS still passing.
 */
const finalDiff = (i: ScoreInput) => (typeof i.final.diff === 'string' ? i.final.diff : '');

export function testsPass(i: ScoreInput): number {
  const t = i.tests;
  if (!t || !t.ran || !t.applied) return 0;
  const f2p = fractionPassed(i.task.FAIL_TO_PASS, t.results);
  const p2p = fractionPassed(i.task.PASS_TO_PASS, t.results);
  return f2p === 1 && p2p === 1 ? 1 : 0;
}

export const codeRepairRubric: RewardFn[] = [
  { name: 'diff_similarity', weight: 0.5, fn: (i) => diffSimilarity(finalDiff(i), i.task.patch) },
  { name: 'tests_pass', weight: 1.0, fn: testsPass },
  { name: 'fail_to_pass', weight: 0, fn: (i) => (i.tests?.ran && i.tests.applied ? fractionPassed(i.task.FAIL_TO_PASS, i.tests.results) : 0) },
  { name: 'pass_to_pass', weight: 0, fn: (i) => (i.tests?.ran && i.tests.applied ? fractionPassed(i.task.PASS_TO_PASS, i.tests.results) : 0) },
  { name: 'patch_applies', weight: 0, fn: (i) => (finalDiff(i) !== '' && i.tests?.applied ? 1 : 0) },
  { name: 'produced_diff', weight: 0, fn: (i) => (finalDiff(i).trim() !== '' ? 1 : 0) },
];
