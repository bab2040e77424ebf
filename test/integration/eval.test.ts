/**
 * EvalSweep end to end on a real Temporal dev server, and the `ratchet schedule`
 * commands against it. The real plan/record activities run; the rollout worker is
 * a test double that writes real trajectories to the store (no model or Docker in
 * this test: the rollout path has its own integration tests).
 */
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { Worker } from '@temporalio/worker';
import { createEvalActivities } from '../../src/activities/eval';
import type { EvalSweepInput, EvalSweepResult } from '../../src/contracts/eval';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { main } from '../../src/cli/index';
import { EXIT } from '../../src/cli/exit';
import { RunConfig } from '../../src/config/schema';
import { EvalResult } from '../../src/contracts/eval';
import type { RolloutSummary } from '../../src/contracts/trajectory';
import { logger } from '../../src/shared/logger';
import { paths } from '../../src/shared/paths';
import { taskIdOf, type RolloutInput, type SyncWeightsInput } from '../../src/contracts';

const TEMPORAL = paths.temporalBin();
const maybe = existsSync(TEMPORAL) ? describe : describe.skip;
if (!existsSync(TEMPORAL)) console.warn(`SKIPPED EvalSweep tests: ${TEMPORAL} missing. Fix: bash infra/temporal.sh setup`);

const task = (id: string) => ({
  instance_id: id, repo: 'pkg/x', base_commit: 'abc', problem_statement: `${id} breaks`,
  patch: `diff --git a/src/${id}.py b/src/${id}.py\n--- a/src/${id}.py\n+++ b/src/${id}.py\n@@ -1 +1 @@\n-a\n+b\n`,
  test_patch: '', FAIL_TO_PASS: ['test_x'], PASS_TO_PASS: [], gold_functions: [`src/${id}.py::fix`],
  source: { type: 'snapshot', repo_path: '/tmp/x' },
});

maybe('EvalSweep and schedules on a real dev server', () => {
  let env: TestWorkflowEnvironment;
  let root: string;
  let store: LocalArtifactStore;
  const rolloutCalls: RolloutInput[] = [];
  const syncCalls: SyncWeightsInput[] = [];
  const adapterRef = (v: number) => ({ uri: `file:///adapters/v${v}`, sha256: String(v).repeat(64), bytes: 1 });

  beforeAll(async () => {
    root = mkdtempSync(path.join(tmpdir(), 'ratchet-eval-'));
    process.env.RATCHET_ARTIFACTS = path.join(root, 'artifacts');
    process.env.RATCHET_TASKS = path.join(root, 'tasks');
    store = new LocalArtifactStore(process.env.RATCHET_ARTIFACTS);
    mkdirSync(process.env.RATCHET_TASKS, { recursive: true });
    writeFileSync(path.join(process.env.RATCHET_TASKS, 'heldout.jsonl'), ['t1', 't2', 't3'].map((t) => JSON.stringify(task(t))).join('\n') + '\n');
    writeFileSync(path.join(process.env.RATCHET_TASKS, 'broken.jsonl'), '{"instance_id": "x"}\n');
    await store.putJson('runs/r1/config.json', RunConfig.parse({ env: [{ id: 'code-repair' }] }));
    await store.put('runs/r1/metrics.jsonl', [1, 2].map((v) => JSON.stringify({ step: v - 1, policy_version: v, adapter: adapterRef(v) })).join('\n') + '\n');
    env = await TestWorkflowEnvironment.createLocal({ server: { executable: { type: 'existing-path', path: TEMPORAL } } });
  }, 120_000);

  afterAll(async () => {
    await env?.teardown();
    delete process.env.RATCHET_ARTIFACTS;
    delete process.env.RATCHET_TASKS;
  });

  async function withWorkers<T>(fn: () => Promise<T>): Promise<T> {
    const main = await Worker.create({
      connection: env.nativeConnection, taskQueue: 'ratchet',
      workflowsPath: require.resolve('../../src/workflows/evalSweep'),
      activities: {
        ...createEvalActivities({ store, logger }),
        // Serving an adapter is the weight-sync activity's job (tested on real vLLM); here, what the sweep asks for.
        async syncWeights(input: SyncWeightsInput) {
          syncCalls.push(input);
          return { policyVersion: input.policyVersion, loaded: [], alreadyLoaded: [], unloaded: [], ms: 0 };
        },
      },
    });
    const rollout = await Worker.create({
      connection: env.nativeConnection, taskQueue: 'ratchet-rollout',
      activities: {
        async rollout(input: RolloutInput): Promise<RolloutSummary> {
          rolloutCalls.push(input);
          const id = taskIdOf(input.task);
          // Newer policies do better: v2 fixes t1 and t2 on sample 0, v1 only t1.
          const pass = input.rolloutIndex === 0 && (id === 't1' || (id === 't2' && input.policyVersion >= 2));
          const traj = await store.putJson(`runs/${input.runId}/eval-trajectories/${input.groupId}-${input.rolloutIndex}.json`, {
            final: { files: [pass ? `src/${id}.py` : 'src/wrong.py'], functions: pass ? ['fix'] : [] },
            stats: { prompt_tokens: 200, completion_tokens: 50, tool_calls: 3, tool_errors: 0, commands: [], tools_used: {} },
          });
          return {
            task_id: id, group_id: input.groupId, rollout_index: input.rolloutIndex, trajectory: traj,
            reward: pass ? 1.5 : 0, components: { tests_pass: pass ? 1 : 0, diff_similarity: pass ? 1 : 0.1 },
            stop_reason: 'completed', policy_version: input.policyVersion, completion_tokens: 50, tool_calls: 3, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
          };
        },
      },
    });
    return main.runUntil(rollout.runUntil(fn()));
  }

  it('evaluates the newest versions, writes results and memo, then skips them unless forced', async () => {
    const input: EvalSweepInput = { runId: 'r1', newest: 2, taskset: 'heldout', k: 2 };
    const res = await withWorkers(() => env.client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: 'eval-r1-a', args: [input] })) as EvalSweepResult;
    expect(res.evaluated.map((e) => e.version)).toEqual([1, 2]);
    expect(rolloutCalls).toHaveLength(2 * 3 * 2);
    expect(rolloutCalls.find((c) => c.policyVersion === 2)!.modelName).toBe('r1/policy-v2');
    // Each version's adapter is served before its episodes, and nothing is unloaded (a training run may share the server).
    expect(syncCalls.map((c) => [c.policyVersion, c.adapter?.uri, c.keepFromVersion])).toEqual([[1, 'file:///adapters/v1', 0], [2, 'file:///adapters/v2', 0]]);
    const [v1, v2] = res.evaluated;
    // v1: t1 passes 1 of 2 samples -> pass@1 = 0.5 for t1, 0 for t2, t3 -> 1/6; pass@2 = 1/3.
    expect(v1!.passAt1).toBeCloseTo(1 / 6);
    expect(v1!.passAtK).toBeCloseTo(1 / 3);
    expect(v2!.passAtK).toBeCloseTo(2 / 3);
    const file = store.localPath(v2!.key);
    expect(file).toMatch(/runs\/r1\/evals\/2\/[0-9a-f]{16}\.json$/);
    const result = EvalResult.parse(JSON.parse(readFileSync(file, 'utf8')));
    // code-repair's eval metric is pass@k on its tests; it names no localization rewards (the environment
    // owns its eval metrics, src/envs/types.ts EvalMetrics), so files in an answer are not scored as one.
    expect(result.localization).toEqual({ file: null, function: null });
    expect(result.per_episode.tokens).toBe(250);
    const memo = (await env.client.workflow.getHandle('eval-r1-a').describe()).memo as { evaluated: unknown[] };
    expect(memo.evaluated).toHaveLength(2);

    const again = await withWorkers(() => env.client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: 'eval-r1-b', args: [input] })) as EvalSweepResult;
    expect(again.evaluated).toEqual([]);
    expect(again.skipped).toEqual([1, 2]);
    const forced = await withWorkers(() => env.client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: 'eval-r1-c', args: [{ ...input, newest: 1, force: true }] })) as EvalSweepResult;
    expect(forced.evaluated.map((e) => e.version)).toEqual([2]);
  });

  it('fails a sweep on a task set that does not validate, naming file and field', async () => {
    const run = withWorkers(() => env.client.workflow.execute('EvalSweep', { taskQueue: 'ratchet', workflowId: 'eval-r1-bad', args: [{ runId: 'r1', taskset: 'broken' }] }));
    await expect(run).rejects.toMatchObject({ cause: { cause: { message: expect.stringMatching(/broken\.jsonl:1: field "repo"/) } } });
  });

  it('ratchet schedule: create, list, trigger, pause, delete; bad input gets exit codes', async () => {
    const g = ['--address', env.address];
    const errs: string[] = [];
    const logs: string[] = [];
    jest.spyOn(console, 'error').mockImplementation((...a) => { errs.push(a.join(' ')); });
    jest.spyOn(console, 'log').mockImplementation((...a) => { logs.push(a.join(' ')); });
    try {
      expect(await main([...g, 'schedule', 'eval', '--run', 'nope', '--every', '30m'])).toBe(EXIT.notFound);
      expect(errs.join('\n')).toMatch(/run "nope" not found/);
      expect(await main([...g, 'schedule', 'eval', '--run', 'r1', '--every', '30m', '--taskset', 'broken'])).toBe(EXIT.invalidInput);
      expect(errs.join('\n')).toMatch(/failed validation/);
      expect(await main([...g, 'schedule', 'eval', '--run', 'r1', '--every', 'often'])).toBe(EXIT.usage);
      expect(await main([...g, 'schedule', 'eval', '--run', 'r1', '--every', '1h', '--k', '2', '--newest', '1', '--force'])).toBe(EXIT.ok);
      const id = 'eval-r1-heldout';
      const handle = env.client.schedule.getHandle(id);
      const desc = await handle.describe();
      expect(desc.policies.overlap).toBe('SKIP');
      expect(desc.spec.intervals?.[0]?.every).toBe(3_600_000);
      expect(await main([...g, 'schedule', 'list'])).toBe(EXIT.ok);
      expect(logs.join('\n')).toContain(id);
      // trigger starts a real EvalSweep through the schedule
      await withWorkers(async () => {
        expect(await main([...g, 'schedule', 'trigger', id])).toBe(EXIT.ok);
        for (let i = 0; i < 60; i++) {
          const d = await handle.describe();
          const started = d.info.recentActions[0]?.action.workflow.workflowId;
          if (started) {
            const r = await env.client.workflow.getHandle(started).result() as EvalSweepResult;
            expect(r.evaluated.map((e) => e.version)).toEqual([2]);
            return;
          }
          await new Promise((r) => setTimeout(r, 500));
        }
        throw new Error('the schedule never started a workflow');
      });
      expect(await main([...g, 'schedule', 'pause', id])).toBe(EXIT.ok);
      expect((await handle.describe()).state.paused).toBe(true);
      expect(await main([...g, 'schedule', 'unpause', id])).toBe(EXIT.ok);
      expect(await main([...g, 'schedule', 'delete', id])).toBe(EXIT.ok);
      expect(await main([...g, 'schedule', 'delete', id])).toBe(EXIT.notFound);
    } finally {
      jest.restoreAllMocks();
    }
  });
});
