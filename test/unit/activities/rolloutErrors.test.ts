/**
 * Which rollout errors are bad input and which are retried or waited for (issue 25, hole 2;
 * docs/errors.md): only input that stays wrong whatever the retry is InvalidRolloutTask.
 */
import { mkdtempSync, promises as fsp, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { MockActivityEnvironment } from '@temporalio/testing';
import { createRolloutActivities } from '../../../src/activities/rollout';
import type { RolloutInput } from '../../../src/contracts/rollout';
import { isTransientReadError } from '../../../src/rollouts/errors';
import { StoreUnavailableError } from '../../../src/artifacts/errors';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import type { RolloutSummary } from '../../../src/contracts/trajectory';
import { call, CALC_FILES, FakeSandboxManager, ScriptedModel } from '../../helpers/rolloutFakes';

jest.setTimeout(30_000);

const task = {
  instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: [], gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest',
  source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
};

function setup() {
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-art-')));
  const model = new ScriptedModel([{ tool_calls: [call('result', { files: ['pkg/calc.py'], functions: ['add'] })] }]);
  const acts = createRolloutActivities({ store, sandboxes: new FakeSandboxManager(CALC_FILES), openaiFactory: () => model });
  return { store, acts };
}

function input(over: Partial<RolloutInput> = {}): RolloutInput {
  return {
    runId: 'run1', step: 2, groupId: 'g0', rolloutIndex: 1, envId: 'swe-grep', task, taskSetDir: '/tasks',
    policyVersion: 1, modelName: 'policy-v1', sampling: { temperature: 1, top_p: 1, max_tokens: 64 },
    envArgs: { max_tokens: 500, max_tool_calls: 5, max_turns: 4 }, rubric: {},
    sandbox: { memory_mb: 512, cpus: 1, pids_limit: 128, disk_mb: 256, exec_timeout_s: 30, output_limit_bytes: 16384, warm_pool_size: 0 },
    inferenceBaseUrl: 'http://127.0.0.1:8000/v1', seed: 7, ...over,
  };
}

const run = (acts: ReturnType<typeof setup>['acts'], i: RolloutInput): Promise<RolloutSummary> => new MockActivityEnvironment({ attempt: 1 }).run(acts.rollout, i);

describe('rollout errors: transient is retried, only what stays wrong is invalid input', () => {
  afterEach(() => jest.restoreAllMocks());

  test('a task-file read failing with EMFILE or EIO is retried (TaskReadError), and the retry goes through', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    writeFileSync(path.join(dir, 'tasks.jsonl'), `${JSON.stringify(task)}\n`);
    const ref = { taskSetDir: dir, task: { datasetPath: 'tasks.jsonl', instanceId: 'calc-1' } };
    const { acts } = setup();
    for (const code of ['EMFILE', 'EIO']) {
      jest.spyOn(fsp, 'stat').mockRejectedValueOnce(Object.assign(new Error(`${code}: failed, stat '${dir}/tasks.jsonl'`), { code }));
      await expect(run(acts, input(ref))).rejects.toMatchObject({ type: 'TaskReadError', nonRetryable: false });
    }
    expect((await run(acts, input(ref))).task_id).toBe('calc-1');
  });

  test('a task file missing on this host is retried; once it is there the rollout runs', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    const ref = { taskSetDir: dir, task: { datasetPath: 'tasks.jsonl', instanceId: 'calc-1' } };
    const { acts } = setup();
    await expect(run(acts, input(ref))).rejects.toMatchObject({ type: 'TaskReadError', nonRetryable: false });
    writeFileSync(path.join(dir, 'tasks.jsonl'), `${JSON.stringify(task)}\n`);
    expect((await run(acts, input(ref))).task_id).toBe('calc-1');
  });

  test('a task file that stays wrong (an extension no reader knows) is InvalidRolloutTask', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
    writeFileSync(path.join(dir, 'tasks.csv'), 'x\n');
    const { acts } = setup();
    await expect(run(acts, input({ taskSetDir: dir, task: { datasetPath: 'tasks.csv', instanceId: 'calc-1' } })))
      .rejects.toMatchObject({ type: 'InvalidRolloutTask', nonRetryable: true });
  });

  test('the run config unreadable from a store that is down is StoreUnavailable (the step waits), not invalid input', async () => {
    const { store, acts } = setup();
    jest.spyOn(store, 'exists').mockRejectedValueOnce(new StoreUnavailableError('s3://bucket/p', 'connect ECONNREFUSED'));
    await expect(run(acts, input())).rejects.toMatchObject({ type: 'StoreUnavailable', nonRetryable: true });
    // The next try reads it (the failed read was not cached).
    expect((await run(acts, input())).task_id).toBe('calc-1');
  });

  test('an unknown environment stays wrong on every retry: InvalidRolloutTask', async () => {
    const { acts } = setup();
    await expect(run(acts, input({ envId: 'no-such-env' }))).rejects.toMatchObject({ type: 'InvalidRolloutTask', nonRetryable: true });
  });

  test('the trajectory write finding the store down fails as StoreUnavailable (the step waits; no attempt used)', async () => {
    const { store, acts } = setup();
    // The trajectory's write, not the turn journal's (a journal write that fails only ends the journal).
    const put = store.put.bind(store);
    jest.spyOn(store, 'put').mockImplementation((key, data) => (key.includes('.journal/') ? put(key, data) : Promise.reject(new StoreUnavailableError('s3://bucket/p', 'HTTP 503'))));
    await expect(run(acts, input())).rejects.toMatchObject({ type: 'StoreUnavailable', nonRetryable: true });
  });

  test('isTransientReadError: errno codes and the Parquet reader\'s text', () => {
    expect(isTransientReadError(Object.assign(new Error('x'), { code: 'ENOENT' }))).toBe(true);
    expect(isTransientReadError(Object.assign(new Error('x'), { code: 'EISDIR' }))).toBe(false);
    expect(isTransientReadError(new Error('cannot read Parquet task file /t.parquet: Error: EIO: i/o error, read'))).toBe(true);
    expect(isTransientReadError(new Error('task file /t.csv has extension ".csv"; use .jsonl or .parquet'))).toBe(false);
  });
});
