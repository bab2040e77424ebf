/**
 * An external harness's own failure (it crashed, gave no final answer, flooded its endpoint) is a
 * failed episode with its stop reason, never an infrastructure error: only a failure of the
 * infrastructure itself is retried and dropped (issue 29, "Bad input"). The built-in agent loop's
 * "error" means its sandbox call failed (a lost container), which is infrastructure; a harness's is not.
 * Found by the real mini-swe-agent eval sweep, where every episode became infra_error.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { AgentResult } from '../../../src/agent/loop';

jest.mock('../../../src/harness/run', () => {
  const actual = jest.requireActual('../../../src/harness/run');
  return {
    ...actual,
    // The harness process itself is tested with real namespaces in harness-run.test.ts; here only
    // what the episode makes of its outcome matters.
    runHarness: jest.fn(async (): Promise<AgentResult> => ({
      messages: [{ role: 'user', content: 'fix it' }],
      turns: [],
      stop_reason: 'error',
      error: 'harness mini-swe-agent exited without a final answer (no RATCHET_FINAL line): RepeatedFormatError',
      stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
      model_ms: 1,
      tools_ms: 0,
    })),
  };
});

import { createRolloutActivities } from '../../../src/activities/rollout';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { Trajectory, type RolloutSummary } from '../../../src/contracts/trajectory';
import { CALC_FILES, FakeSandboxManager, ScriptedModel } from '../../helpers/rolloutFakes';

jest.setTimeout(30_000);

const task = {
  instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1',
  patch: 'diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n',
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'],
  gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest', source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
};

test("a harness that ends without a final answer is a scored, failed episode with its stop reason, not an infrastructure error", async () => {
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
  const acts = createRolloutActivities({ store, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: () => new ScriptedModel([]) });
  const input: RolloutInput = {
    runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 0, envId: 'mini-swe-agent', task, taskSetDir: '/tasks',
    policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
    sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
    inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7,
  };
  // Attempt 1 of 4: an infrastructure failure would throw here (to be retried); a failed episode returns.
  const summary: RolloutSummary = await new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, input);
  expect(summary.stop_reason).toBe('error');
  expect(summary.reward).toBe(0);
  const t = Trajectory.parse(await store.getJson(summary.trajectory));
  expect(t.stop_reason).toBe('error');
  expect(t.error).toMatch(/exited without a final answer/);
});
