import { z } from 'zod';

/**
 * Test outcomes of a task's FAIL_TO_PASS and PASS_TO_PASS ids after the agent's
 * diff was applied in a fresh sandbox. Parsing pytest's `-rA` summary is pure.
 */
export const TestStatus = z.enum(['passed', 'failed', 'error', 'skipped', 'missing']);
export type TestStatus = z.infer<typeof TestStatus>;

export interface TestEvidence {
  /** The agent's diff applied cleanly (an empty diff counts as applied: nothing to apply). */
  applied: boolean;
  ran: boolean;
  results: Record<string, TestStatus>;
  note?: string;
}

const SUMMARY = /^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)/;

/** Reads pytest's short summary (`-rA`): one `STATUS node_id` line per test. */
export function parsePytestSummary(output: string, ids: string[]): Record<string, TestStatus> {
  const seen = new Map<string, TestStatus>();
  for (const line of output.split('\n')) {
    const m = SUMMARY.exec(line.trim());
    if (!m) continue;
    const status = m[1] as string;
    const id = m[2] as string;
    const mapped: TestStatus = status === 'PASSED' || status === 'XPASS' ? 'passed'
      : status === 'SKIPPED' || status === 'XFAIL' ? 'skipped'
      : status === 'ERROR' ? 'error' : 'failed';
    // A test with a failing teardown shows up as PASSED and ERROR: the worse one counts.
    if (!seen.has(id) || mapped !== 'passed') seen.set(id, mapped);
  }
  const results: Record<string, TestStatus> = {};
  for (const id of ids) results[id] = seen.get(id) ?? 'missing';
  return results;
}

export function fractionPassed(ids: string[], results: Record<string, TestStatus>): number {
  if (ids.length === 0) return 1;
  return ids.filter((id) => results[id] === 'passed').length / ids.length;
}

/** The task has failing tests to decide whether an episode solved it. */
export function hasFailingTests(task: { FAIL_TO_PASS: string[] }): boolean {
  return task.FAIL_TO_PASS.length > 0;
}
