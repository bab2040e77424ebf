/**
 * [model] init_from in the workflows (fake activities, real dev server): the resolved origin reaches
 * trainer.load as `init` wherever the run has no checkpoint of its own (its first load, and after a
 * fallback to "the base model"), never beside a checkpoint; version 0 is the origin's adapter, served
 * as <run>/policy-v0 before the first rollout and kept while rollouts may use it; each step's
 * lineage names the origin. SftRun takes it the same way.
 * Set RATCHET_RECORD_HISTORIES=1 to record histories for the replay test.
 */
import type { Client, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import type { TrainRun } from '../../../src/workflows/trainRun';
import type { TrainRunInput } from '../../../src/contracts';
import { adapterName } from '../../../src/shared/adapters';
import { FAKE_INIT, makeFakes, type FakeOptions } from '../../helpers/workflowFakes';
import { inNamespace, useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';

jest.setTimeout(120_000);

describeWithStack('init_from (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (heartbeat timeouts, round trips), so they run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });

  const withWorkers = <T>(opts: FakeOptions, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, makeFakes({ initFrom: true, ...opts }), { trainers: ['w1', 'w2', 'w3'], namespace: ns },
      (f, stack) => fn(f, stack.client)));

  let n = 0;
  async function start(client: Client, type: 'TrainRun' | 'SftRun', input: Partial<TrainRunInput> = {}): Promise<WorkflowHandleWithFirstExecutionRunId<typeof TrainRun>> {
    const runId = `init-${process.pid}-${++n}`;
    return client.workflow.start<typeof TrainRun>(type, {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, ...input }],
    });
  }

  test.concurrent('TrainRun: the origin reaches trainer.load; version 0 is its adapter, served first and kept for the rollouts ahead', async () => {
    await withWorkers({ orchestrator: { max_steps: 3, async_level: 1 } }, async (f, client) => {
      const handle = await start(client, 'TrainRun');
      const runId = handle.workflowId;
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      // Loaded once, without a checkpoint, with the origin as its initial adapter.
      expect(f.loads).toEqual([{ worker: 'w1', checkpoint: undefined, lossKind: 'grpo', init: FAKE_INIT }]);
      // The first weight sync serves version 0 from the origin's adapter, before any rollout.
      expect(f.syncs[0]).toMatchObject({ policyVersion: 0, adapter: FAKE_INIT.adapter, keepFromVersion: 0 });
      const firstSync = f.events.findIndex((e) => e.what === 'sync');
      const firstRollout = f.events.findIndex((e) => e.what === 'rollout-start');
      expect(firstSync).toBeGreaterThanOrEqual(0);
      expect(firstSync).toBeLessThan(firstRollout);
      // Version 0's rollouts ask for <run>/policy-v0, not the base model.
      const v0 = f.rolloutInputs.filter((r) => r.policyVersion === 0);
      expect(v0.length).toBeGreaterThan(0);
      expect(new Set(v0.map((r) => r.modelName))).toEqual(new Set([adapterName(runId, 0)]));
      // async_level 1: step 1's rollouts ran on version 0 while step 0 trained; the sync of version 1 keeps version 0.
      expect(f.syncs.map((s) => [s.policyVersion, s.keepFromVersion, s.adapter?.uri])).toEqual([
        [0, 0, FAKE_INIT.adapter.uri], [1, 0, 'file:///fake/adapter-step-0'], [2, 0, 'file:///fake/adapter-step-1'], [3, 1, 'file:///fake/adapter-step-2']]);
      // A fresh ledger: steps 0..2 of this run, each applied once, versions from 1.
      expect(f.records.map((r) => [r.record.step, r.record.policy_version])).toEqual([[0, 1], [1, 2], [2, 3]]);
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      for (const r of f.records) {
        expect(r.record.lineage?.trainer.init_from).toEqual({
          from: 'sft-1', run_id: 'sft-1', step: 4, checkpoint_sha256: FAKE_INIT.checkpoint.sha256, adapter_sha256: FAKE_INIT.adapter.sha256,
        });
      }
      await recordHistory(handle, 'trainrun-init-from');
    });
  });

  test.concurrent('TrainRun: a replaced trainer reloads the run\'s own checkpoint without init; a fallback to "the base model" takes init again', async () => {
    await withWorkers({ orchestrator: { max_steps: 3 }, deadTrainers: ['w1'], deadFromStep: 1, corruptCheckpoints: [0] }, async (f, client) => {
      const handle = await start(client, 'TrainRun', { trainerTimeouts: { heartbeat: '1 second', scheduleToStart: '2 seconds' } });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      // w1 starts from init and dies in step 1; w2 finds step 0's checkpoint corrupt; the run falls back to
      // its start, which is the origin's adapter: w2 loads init again (no checkpoint), and version 0 is served from it again.
      // A load repeated back to back is one load retried (1 s heartbeats time out on a loaded machine): counted once.
      const loads = f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null, l.init ? 'init' : null]);
      expect(loads.filter((l, i) => i === 0 || JSON.stringify(l) !== JSON.stringify(loads[i - 1]))).toEqual([
        ['w1', null, 'init'], ['w2', 'file:///fake/ckpt-step-0', null], ['w2', null, 'init'],
      ]);
      expect(f.fallbacks[0]!.result).toMatchObject({ fellBack: true, record: { retrained_steps: [0] }, state: { nextStep: 0, policyVersion: 0 } });
      expect(f.syncs.filter((s) => s.policyVersion === 0).map((s) => s.adapter?.uri)).toEqual([FAKE_INIT.adapter.uri, FAKE_INIT.adapter.uri]);
      await recordHistory(handle, 'trainrun-init-from-fallback');
    });
  });

  test.concurrent('SftRun: starts from the origin too (trainer.load init, version 0 served first)', async () => {
    await withWorkers({ sft: { batch_size: 2 }, orchestrator: { max_steps: 2 } }, async (f, client) => {
      const handle = await start(client, 'SftRun');
      expect(await handle.result()).toMatchObject({ stepsCompleted: 2, policyVersion: 2 });
      expect(f.loads).toEqual([{ worker: 'w1', checkpoint: undefined, lossKind: 'sft', init: FAKE_INIT }]);
      expect(f.syncs.map((s) => [s.policyVersion, s.adapter?.uri])).toEqual([[0, FAKE_INIT.adapter.uri], [1, 'file:///fake/adapter-step-0'], [2, 'file:///fake/adapter-step-1']]);
      await recordHistory(handle, 'sftrun-init-from');
    });
  });

  test.concurrent('without init_from nothing changes: loads carry no init, version 0 is the base model and is never synced', async () => {
    await withWorkers({ initFrom: false, orchestrator: { max_steps: 1 } }, async (f, client) => {
      const handle = await start(client, 'TrainRun');
      await handle.result();
      expect(f.loads.map((l) => 'init' in l)).toEqual([false]);
      expect(f.syncs.map((s) => s.policyVersion)).toEqual([1]);
      expect(new Set(f.rolloutInputs.map((r) => r.modelName))).toEqual(new Set([f.config.inference.served_model]));
    });
  });
});
