/**
 * The debug and code-repair demonstration solvers on real Docker sandboxes, one task each from
 * the local training set (.ratchet/tasks/train.jsonl): the gold patch's steps made with each
 * environment's tools in the task's repository, the tests run there, the episode scored in a
 * fresh sandbox like any rollout. Needs dockerd, the sandbox image and the task set; skips loudly
 * without them (fails under RATCHET_REQUIRE_STACK=1). A few containers, removed at the end.
 */
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import pino from 'pino';
import { defaultImage, SandboxManager } from '../../src/sandbox';
import { makeDemonstrations } from '../../src/sft/demos';
import { loadTasks } from '../../src/tasks/load';
import { paths } from '../../src/shared/paths';

const TASKS = path.join(paths.home(), 'tasks', 'train.jsonl');

function problemHere(): string | null {
  const info = spawnSync('docker', ['info', '--format', '{{.ServerVersion}}'], { encoding: 'utf8', timeout: 10_000 });
  if (info.error || info.status !== 0) return `dockerd is not reachable (${info.error?.message ?? info.stderr.trim()}). Fix: bash infra/docker.sh setup`;
  if (spawnSync('docker', ['image', 'inspect', defaultImage()], { timeout: 10_000 }).status !== 0) return `sandbox image ${defaultImage()} is missing. Fix: bash infra/docker.sh setup`;
  if (!existsSync(TASKS)) return `no task set at ${TASKS}. Fix: bash infra/tasks.sh (or ratchet up)`;
  return null;
}
const problem = problemHere();
if (problem) {
  if (process.env.RATCHET_REQUIRE_STACK === '1') throw new Error(problem);
  console.warn(`SKIPPING scripted solvers on Docker: ${problem}`);
}
const describeDocker = problem ? describe.skip : describe;

describeDocker('debug and code-repair solvers on real sandboxes', () => {
  test.each([['debug', 'fail_to_pass'], ['code-repair', 'tests_pass']])('%s: the gold patch replayed with the env\'s tools solves the task', async (envId, solved) => {
    const tasks = (await loadTasks(TASKS, { onInvalid: 'skip' })).tasks.slice(0, 1);
    const sandboxes = new SandboxManager({ log: pino({ level: 'warn' }) });
    const demos = await makeDemonstrations({ envId, tasks, taskSetDir: path.dirname(TASKS), sandboxes, minReward: 1, concurrency: 1 })
      .finally(() => sandboxes.close());
    expect(demos.skipped).toEqual([]);
    const t = demos.all[0]!;
    expect(t.stop_reason).toBe('completed');
    // Real tool outputs: the repository's own file, the tests run in the sandbox.
    const outputs = t.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
    expect(outputs.length).toBeGreaterThanOrEqual(3);
    // The tests run in the sandbox pass at the end (debug: they failed at its first eval).
    expect(outputs.at(-1)).toMatch(/\[exit code 0\]$/);
    if (envId === 'debug') expect(outputs[0]).toMatch(/FAILED|\[exit code 1\]/);
    expect(t.reward!.components[solved]).toBe(1);
    expect(demos.kept).toHaveLength(1);
  }, 600_000);
});
