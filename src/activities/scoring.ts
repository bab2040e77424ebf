import { performance } from 'node:perf_hooks';
import type { AcquireOptions, SandboxManager } from '../envs/sandbox';
import { REPO_DIR } from '../envs/sandbox';
import { parsePytestSummary, type TestEvidence } from '../envs/tests';
import { pytestCommand } from '../envs/tests-run';
import type { Task } from '../tasks/schema';

const AGENT_PATCH = '/tmp/ratchet-agent.patch';
const TEST_PATCH = '/tmp/ratchet-test.patch';

export interface TestRunInput {
  sandboxes: SandboxManager;
  acquire: AcquireOptions;
  task: Task;
  diff: string;
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * Runs the task's FAIL_TO_PASS and PASS_TO_PASS tests with the agent's diff
 * applied (`git apply`) in a FRESH sandbox: nothing the agent left running or
 * changed outside its diff can influence the verdict.
 */
export async function runTestsWithDiff(input: TestRunInput): Promise<{ evidence: TestEvidence; sandboxMs: number }> {
  const { task } = input;
  const ids = [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS];
  const missing = Object.fromEntries(ids.map((id) => [id, 'missing' as const]));
  if (input.diff.trim() === '') {
    return { evidence: { applied: true, ran: false, results: missing, note: 'empty diff: the agent changed nothing' }, sandboxMs: 0 };
  }
  const t0 = performance.now();
  const sandbox = await input.sandboxes.acquire({ ...input.acquire, signal: input.signal });
  const opts = { cwd: REPO_DIR, timeoutMs: input.timeoutMs, signal: input.signal };
  try {
    await sandbox.writeFile(AGENT_PATCH, input.diff.endsWith('\n') ? input.diff : `${input.diff}\n`);
    const applied = await sandbox.exec(`git apply --whitespace=nowarn ${AGENT_PATCH}`, opts);
    if (applied.exitCode !== 0) {
      return { evidence: { applied: false, ran: false, results: missing, note: `git apply failed: ${applied.stderr.slice(0, 500)}` }, sandboxMs: performance.now() - t0 };
    }
    if (task.test_patch.trim() !== '') {
      await sandbox.writeFile(TEST_PATCH, task.test_patch.endsWith('\n') ? task.test_patch : `${task.test_patch}\n`);
      const tp = await sandbox.exec(`git apply --whitespace=nowarn ${TEST_PATCH}`, opts);
      if (tp.exitCode !== 0) {
        return { evidence: { applied: true, ran: false, results: missing, note: `the task's test_patch does not apply over the agent's diff: ${tp.stderr.slice(0, 500)}` }, sandboxMs: performance.now() - t0 };
      }
    }
    const r = await sandbox.exec(pytestCommand(task.test_cmd, ids, ['-rA']), opts);
    const results = parsePytestSummary(r.stdout, ids);
    const note = r.timedOut ? `tests timed out after ${Math.round(r.durationMs / 1000)}s` : undefined;
    return { evidence: { applied: true, ran: true, results, ...(note ? { note } : {}) }, sandboxMs: performance.now() - t0 };
  } finally {
    await sandbox.release();
  }
}
