/**
 * Scoring an episode: the environment's rubric over its final answer, after the
 * task's tests ran against the final diff in a fresh sandbox where the
 * environment asks for it.
 */
import { performance } from 'node:perf_hooks';
import type { ParsedRolloutInput } from '../contracts/rollout';
import type { AcquireOptions, SandboxManager } from '../sandbox/interface';
import { REPO_DIR } from '../sandbox/interface';
import { parsePytestSummary, type TestEvidence } from '../envs/tests';
import { pytestCommand } from '../envs/tests-run';
import { scoreRubric, zeroScore, type Environment, type Score } from '../envs/types';
import type { Liveness } from '../shared/liveness';
import type { Task } from '../tasks/schema';
import type { Ran } from './episode';

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

export interface EpisodeScore {
  score: Score;
  tests?: TestEvidence;
  /** Sandbox time of the test run. */
  sandboxMs: number;
  /** Set when Docker failed to run the tests: that says nothing about the agent's diff. */
  infra?: string;
}

/** An episode the loop or the sandbox ended with "error" scores zero; any other is scored by the rubric. */
export async function scoreEpisode(p: {
  input: ParsedRolloutInput; env: Environment; episode: Ran; sandboxes: SandboxManager; live: Liveness;
}): Promise<EpisodeScore> {
  const { input, env, episode } = p;
  const { result, final, task } = episode;
  if (result.stop_reason === 'error') return { score: zeroScore(env.rubric, input.rubric), sandboxMs: 0 };
  const signal = p.live.signal;
  let tests: TestEvidence | undefined;
  let sandboxMs = 0;
  let infra: string | undefined;
  if (env.needsTests) {
    p.live.progress({ phase: 'scoring test run' });
    try {
      const out = await runTestsWithDiff({
        sandboxes: p.sandboxes,
        acquire: episode.acquire,
        task,
        diff: typeof final.diff === 'string' ? final.diff : '',
        timeoutMs: Math.max(input.sandbox.exec_timeout_s * 1000 * 3, 60_000),
        signal,
      });
      tests = out.evidence;
      sandboxMs = out.sandboxMs;
      p.live.progress({ phase: 'scored' });
    } catch (err) {
      if (signal?.aborted) throw err;
      infra = `the scoring test run failed: ${(err as Error).message}`;
    }
  }
  const limits = { max_tokens: input.envArgs.max_tokens, max_tool_calls: input.envArgs.max_tool_calls, max_turns: input.envArgs.max_turns };
  const score = scoreRubric(env.rubric, {
    task, final, answered: result.answer !== undefined, stop_reason: result.stop_reason, stats: result.stats, limits, tests,
  }, input.rubric);
  return { score, ...(tests ? { tests } : {}), sandboxMs, ...(infra !== undefined ? { infra } : {}) };
}
