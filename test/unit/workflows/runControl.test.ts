/**
 * Audited live control (src/workflows/runControl.ts) on a real dev server with fake
 * activities: every action is an update the workflow validates, recorded in the step
 * records with the caller's identity and reason; `set` changes the learning rate and
 * the staleness bound at the next step boundary; an invalid change is refused with a
 * clear message and leaves no trace.
 */
import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { controlUpdates, pauseUpdate, progressQuery, setSettingsUpdate } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import { makeFakes } from '../../helpers/workflowFakes';
import { inNamespace, useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';
import { EVAL_PRIORITY } from '../../../src/shared/fairness';
import { temporal } from '@temporalio/proto';

jest.setTimeout(150_000);

describeWithStack('TrainRun audited control (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (trainer sleeps, a slow sweep), so they run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });

  /** The fake stack in a namespace of its own around fn: main, rollout, trainer-announce and one trainer worker. */
  const withWorkers = <T>(f: ReturnType<typeof makeFakes>, fn: (client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, f, { namespace: ns }, (_f, stack) => fn(stack.client)));

  test.concurrent('pause, resume, set and stop are recorded with identity and reason; set takes effect at the next step; bad values are refused', async () => {
    // 1.5 s steps: the updates and the query below land inside step 0 with the suite's other tests running beside it.
    const f = makeFakes({ orchestrator: { max_steps: 6, async_level: 0 }, trainMs: 1500 });
    await withWorkers(f, async (client) => {
      const runId = `control-${process.pid}`;
      // continueAsNewEvery 2: the change survives continue-as-new.
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, continueAsNewEvery: 2 }],
      });
      await until(() => f.events.some((e) => e.what === 'train-start' && e.step === 0));

      // Invalid: refused by the validator, with the reason why; nothing recorded.
      const refused = async (change: { args: [Record<string, unknown>] }) => {
        try {
          await handle.executeUpdate<string, [Record<string, unknown>]>(setSettingsUpdate.name, change);
        } catch (err) {
          expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
          return ((err as WorkflowUpdateFailedError).cause as Error).message;
        }
        throw new Error('accepted');
      };
      expect(await refused({ args: [{ learning_rate: -0.001, reason: 'oops', identity: 'alice@h' }] })).toMatch(/learning_rate must be a number from 0 to 1 \(got -0.001\): a negative rate would climb the loss/);
      expect(await refused({ args: [{ async_level: 1.5, reason: 'x' }] })).toMatch(/async_level must be a whole number from 0 to 8 \(got 1.5\)/);
      expect(await refused({ args: [{ reason: 'x' }] })).toMatch(/nothing to change/);
      expect(await refused({ args: [{ batch_size: 4, reason: 'x' }] })).toMatch(/cannot change batch_size on a running run/);

      await handle.executeUpdate(setSettingsUpdate, { args: [{ learning_rate: 5e-6, async_level: 1, reason: 'loss spikes', identity: 'alice@h' }] });
      const p = await handle.query(progressQuery);
      expect(p.pendingOverrides).toEqual({ learning_rate: 5e-6, async_level: 1 });
      await handle.executeUpdate(controlUpdates.pause, { args: [{ reason: 'look at step 1', identity: 'bob@h' }] });
      await until(async () => (await handle.query(progressQuery)).phase === 'idle' && f.records.length >= 1);
      await handle.executeUpdate(controlUpdates.resume, { args: [{ reason: 'looks fine', identity: 'bob@h' }] });
      await until(() => f.records.length >= 3);
      await handle.executeUpdate(pauseUpdate);
      await until(async () => (await handle.query(progressQuery)).phase === 'idle');
      await handle.executeUpdate(controlUpdates.stop, { args: [{ reason: 'enough', identity: 'carol@h' }] });
      const result = await handle.result();
      expect(result.stopped).toBe('stopped-by-request');

      // Each action once, in order: in the step record written after it, or (after the last record) in the run's result.
      const recorded = [...f.records.flatMap((r) => r.record.control ?? []), ...(result.controls ?? [])];
      expect(recorded.map((c) => [c.action, c.identity, c.reason, c.changes])).toEqual([
        ['set', 'alice@h', 'loss spikes', { learning_rate: 5e-6, async_level: 1 }],
        ['pause', 'bob@h', 'look at step 1', undefined],
        ['resume', 'bob@h', 'looks fine', undefined],
        // An older client's update without a request.
        ['pause', 'unknown', '', undefined],
        ['stop', 'carol@h', 'enough', undefined],
      ]);
      // A stop while paused comes between steps: no step record follows, so the result holds it.
      expect(result.controls?.length).toBeGreaterThan(0);
      for (const c of recorded) expect(c.time).toMatch(/^\d{4}-\d\d-\d\dT/);
      // Step 0 trained with the config's rate; from the boundary after the change on, with the new one, also after continue-as-new.
      const lrs = f.events.filter((e) => e.what === 'train-start').map((e) => [e.step, e.lr]);
      expect(lrs[0]).toEqual([0, undefined]);
      expect(lrs.slice(1).every(([, lr]) => lr === 5e-6)).toBe(true);
      expect(lrs.length).toBeGreaterThanOrEqual(3);
      expect(f.records[0]!.record.overrides).toBeUndefined();
      for (const r of f.records.slice(1)) {
        expect(r.record.overrides).toEqual({ learning_rate: 5e-6, async_level: 1 });
        expect(r.state.overrides).toEqual({ learning_rate: 5e-6, async_level: 1 });
      }
      // Lineage (src/workflows/lineage.ts): the rows sampled, the batch trained on, the checkpoints, the rate.
      const l0 = f.records[0]!.record.lineage!;
      const l1 = f.records[1]!.record.lineage!;
      // On chunks the rows are in the step manifest, which the lineage names; history carries the count only.
      expect(l0.tasks.rows).toEqual([]);
      expect(l0.tasks.row_count).toBe(2);
      expect(l0.tasks.step_manifest?.sha256).toMatch(/^[0-9a-f]{64}$/);
      expect(l1.tasks.step_manifest?.sha256).not.toBe(l0.tasks.step_manifest?.sha256);
      expect(l0.batch_sha256).toBe(f.records[0]!.record.batch!.batch.sha256);
      expect(l0.rollout_policy_versions).toEqual({ 0: 6 });
      expect(l0.trainer).toMatchObject({ step: 0, learning_rate: f.config.trainer.optim.lr, adapter_sha256: f.records[0]!.record.adapter!.sha256 });
      expect(l0.trainer.parent_checkpoint_sha256).toBeUndefined();
      expect(l1.trainer).toMatchObject({ step: 1, learning_rate: 5e-6, parent_checkpoint_sha256: f.records[0]!.record.checkpoint!.sha256 });
      expect(l1.config_sha256).toBe(f.records[0]!.state.configSha256);
      // The staleness bound reached the batch builder.
      expect(f.batches.map((b) => b.orchestrator.async_level)).toEqual([0, ...f.batches.slice(1).map(() => 1)]);
      await recordHistory(client.workflow.getHandle(runId, handle.firstExecutionRunId), 'trainrun-control-audited');
    });
  });

  test.concurrent('eval cadence 2 over 4 steps: sweeps of the checkpoints of steps 1 and 3, abandoned, below training, named in the step records', async () => {
    // A slow sweep (3 s to record) beside fast steps: training must not wait for it.
    const f = makeFakes({ orchestrator: { max_steps: 4, async_level: 0 }, eval: { every_steps: 2, taskset: 'heldout', k: 2 }, evalMs: 3000 });
    await withWorkers(f, async (client) => {
      const runId = `cadence-${process.pid}`;
      // continueAsNewEvery 2: step 1's sweep is still running when the run continues as new after it.
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, continueAsNewEvery: 2 }],
      });
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 4, policyVersion: 4, stopped: 'completed' });

      // Due after the 2nd and 4th finished step (steps 1 and 3), on the checkpoint each saved (v2, v4).
      expect(f.records.map((r) => r.record.eval_sweep?.workflow_id)).toEqual([undefined, `${runId}-step-1-eval`, undefined, `${runId}-step-3-eval`]);
      expect(f.records[1]!.record.eval_sweep).toEqual({ workflow_id: `${runId}-step-1-eval`, policy_version: 2, taskset: 'heldout', k: 2, every_steps: 2 });
      expect(f.records[3]!.record.eval_sweep!.policy_version).toBe(f.records[3]!.record.policy_version);
      // Each sweep evaluates its own version only, on the [eval] task set, and found the version recorded (the plan reads it).
      expect(f.evalPlans.map((p) => [p.versions, p.taskset, p.k, p.maxConcurrent])).toEqual([[[2], 'heldout', 2, 4], [[4], 'heldout', 2, 4]]);

      for (const [step, version] of [[1, 2], [3, 4]] as const) {
        const sweep = client.workflow.getHandle(`${runId}-step-${step}-eval`);
        const res = await sweep.result();
        expect(res.evaluated.map((e: { version: number; episodes: number }) => [e.version, e.episodes])).toEqual([[version, 4]]);
        // Started by the run (its parent), abandoned, below training by priority, with the run's fairness key.
        const desc = await sweep.describe();
        expect(desc.raw.workflowExecutionInfo?.parentExecution?.workflowId).toBe(runId);
        expect(desc.raw.workflowExecutionInfo?.priority).toMatchObject({ priorityKey: EVAL_PRIORITY, fairnessKey: runId });
      }
      const parentEvents = (await handle.fetchHistory()).events ?? [];
      const initiated = parentEvents.map((e) => e.startChildWorkflowExecutionInitiatedEventAttributes).filter((a) => a?.workflowType?.name === 'EvalSweep');
      expect(initiated).toHaveLength(1);
      expect(initiated[0]!.parentClosePolicy).toBe(temporal.api.enums.v1.ParentClosePolicy.PARENT_CLOSE_POLICY_ABANDON);

      // Training did not wait: step 2 trained while step 1's sweep was still recording (it takes 3 s).
      const at = (what: string, pick: (e: { step?: number; version?: number }) => boolean) => f.events.find((e) => e.what === what && pick(e))!.t;
      expect(at('train-start', (e) => e.step === 2)).toBeLessThan(at('eval-record', (e) => e.version === 2));
      // The run's own syncs kept v2 loaded while its sweep ran, also after continue-as-new (keepFromVersion <= 2).
      const trainingSyncs = f.syncs.filter((x) => x.keepFromVersion > 0);
      expect(trainingSyncs.find((x) => x.policyVersion === 4)!.keepFromVersion).toBeLessThanOrEqual(2);
      // The run ended after its last sweep, then unloaded its adapters.
      expect(at('unload-adapters', () => true)).toBeGreaterThan(at('eval-record', (e) => e.version === 4));
      await recordHistory(client.workflow.getHandle(runId, handle.firstExecutionRunId), 'trainrun-eval-cadence');
      await recordHistory(client.workflow.getHandle(`${runId}-step-1-eval`), 'evalsweep-in-run');
    });
  });

  test.concurrent('set --eval-every changes the cadence from the next step boundary, recorded with identity and reason; bad values are refused naming the field', async () => {
    // 1.5 s steps, as above: the set lands inside step 0.
    const f = makeFakes({ orchestrator: { max_steps: 4, async_level: 0 }, trainMs: 1500 });
    await withWorkers(f, async (client) => {
      const runId = `cadence-set-${process.pid}`;
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
      });
      await until(() => f.events.some((e) => e.what === 'train-start' && e.step === 0));
      const refused = async (change: Record<string, unknown>) => {
        try {
          await handle.executeUpdate<string, [Record<string, unknown>]>(setSettingsUpdate.name, { args: [change] });
        } catch (err) {
          expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
          return ((err as WorkflowUpdateFailedError).cause as Error).message;
        }
        throw new Error('accepted');
      };
      expect(await refused({ eval_every_steps: -1, reason: 'oops', identity: 'alice@h' })).toMatch(/^eval_every_steps must be a whole number of steps from 0 \(off\) to 1000000 \(got -1\)/);
      expect(await refused({ eval_every_steps: 1.5, reason: 'x' })).toMatch(/eval_every_steps must be a whole number.*\(got 1.5\)/);
      expect(await refused({ eval_every_steps: '2', reason: 'x' })).toMatch(/eval_every_steps must be a whole number.*\(got 2\)/);

      await handle.executeUpdate(setSettingsUpdate, { args: [{ eval_every_steps: 1, reason: 'watch held-out pass@1', identity: 'dana@h' }] });
      expect((await handle.query(progressQuery)).pendingOverrides).toEqual({ eval_every_steps: 1 });
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(4);

      // Step 0 ran under the config's cadence (off); every step from the next boundary on starts a sweep of its checkpoint.
      expect(f.records.map((r) => r.record.eval_sweep?.policy_version)).toEqual([undefined, 2, 3, 4]);
      expect(f.records.slice(1).every((r) => r.record.eval_sweep!.every_steps === 1)).toBe(true);
      expect(f.records[0]!.record.overrides).toBeUndefined();
      for (const r of f.records.slice(1)) expect(r.record.overrides).toEqual({ eval_every_steps: 1 });
      // Recorded once, with who and why; the refused ones left no trace.
      const recorded = [...f.records.flatMap((r) => r.record.control ?? []), ...(result.controls ?? [])];
      expect(recorded.map((c) => [c.action, c.identity, c.reason, c.changes])).toEqual([['set', 'dana@h', 'watch held-out pass@1', { eval_every_steps: 1 }]]);
      // The progress query names the newest sweep (the run waited for it before it ended, so it has its result).
      const p = await handle.query(progressQuery);
      expect(p.lastEval).toMatchObject({ workflow_id: `${runId}-step-3-eval`, policy_version: 4, step: 3, state: 'completed', result: { version: 4 } });
      await recordHistory(client.workflow.getHandle(runId, handle.firstExecutionRunId), 'trainrun-eval-cadence-set');
    });
  });
});

async function until(check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}
