/**
 * SftRun against a real Temporal dev server (the PyPI CLI, never downloaded) with fake
 * activities: every step trains once with the SFT loss and is served; a trainer that dies
 * mid-step is replaced and the step applied exactly once; pause, stop and status as a
 * TrainRun's; a config without [sft] is refused.
 * Set RATCHET_RECORD_HISTORIES=1 to record histories into test/fixtures/histories/<release>/ for the replay test.
 */
import { WorkflowFailedError, type Client, type WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { SA, pauseUpdate, progressQuery, resumeUpdate, stopAfterCurrentStepUpdate } from '../../../src/workflows/messages';
import type { SftRun } from '../../../src/workflows/sftRun';
import type { TrainRunInput } from '../../../src/contracts';
import { makeFakes, type FakeOptions } from '../../helpers/workflowFakes';
import { inNamespace, useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';

jest.setTimeout(120_000);

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function waitFor(pred: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(100);
  }
}
describeWithStack('SftRun workflow (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (heartbeat timeouts, trainer sleeps), so they run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });

  // An SftRun has no rollouts: no rollout worker.
  const withWorkers = <T>(opts: FakeOptions, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, makeFakes(opts), { trainers: ['w1', 'w2', 'w3'], rollouts: false, namespace: ns },
      (f, stack) => fn(f, stack.client)));

  let n = 0;
  async function start(client: Client, input: Partial<TrainRunInput> = {}): Promise<WorkflowHandleWithFirstExecutionRunId<typeof SftRun>> {
    const runId = `sft-${process.pid}-${++n}`;
    return client.workflow.start<typeof SftRun>('SftRun', {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake-sft.toml', runId, ...input }],
    });
  }

  test.concurrent('every step: a seeded batch of the frozen data, one SFT optimizer step, a checkpoint, weight sync, a step record', async () => {
    await withWorkers({ sft: { batch_size: 3 }, orchestrator: { max_steps: 3, seed: 7 } }, async (f, client) => {
      const handle = await start(client);
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      expect(f.sftPrepares.map((p) => p.data)).toEqual([['demos.jsonl']]);
      expect(f.sftBatches.map((b) => [b.step, b.seed, b.batchSize, b.data.uri])).toEqual([
        [0, 7, 3, 'file:///fake/sft-data'], [1, 7, 3, 'file:///fake/sft-data'], [2, 7, 3, 'file:///fake/sft-data']]);
      // The trainer is loaded with the SFT loss, whatever the config's RL loss is.
      expect(f.loads.map((l) => l.lossKind)).toEqual(['sft']);
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      expect(f.syncs.map((s) => s.policyVersion)).toEqual([1, 2, 3]);
      expect(f.records.map((r) => [r.record.step, r.record.policy_version, r.record.rollouts, r.record.adapter?.uri])).toEqual([
        [0, 1, 0, 'file:///fake/adapter-step-0'], [1, 2, 0, 'file:///fake/adapter-step-1'], [2, 3, 0, 'file:///fake/adapter-step-2']]);
      expect(f.releases.map((r) => r.runId)).toEqual([handle.workflowId]);
      expect(await handle.query(progressQuery)).toMatchObject({ status: 'completed', step: 3, policyVersion: 3 });
      expect((await handle.describe()).typedSearchAttributes.get(SA.status)).toBe('completed');
      await recordHistory(handle, 'sftrun');
    });
  });

  test.concurrent('a trainer that dies mid-step is replaced: it reloads the last checkpoint and each step is applied exactly once', async () => {
    await withWorkers({ sft: {}, orchestrator: { max_steps: 3 }, deadTrainers: ['w1'], deadFromStep: 1 }, async (f, client) => {
      const handle = await start(client, { trainerTimeouts: { heartbeat: '1 second', scheduleToStart: '2 seconds' } });
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      expect(f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null, l.lossKind])).toEqual([
        ['w1', null, 'sft'], ['w2', 'file:///fake/ckpt-step-0', 'sft']]);
      expect([...f.applied.entries()].map(([k, c]) => [k.split('/')[1], c])).toEqual([['0', 1], ['1', 1], ['2', 1]]);
      expect(f.records.map((r) => [r.record.step, r.record.policy_version, r.record.trainer.restarts])).toEqual([[0, 1, 0], [1, 2, 1], [2, 3, 0]]);
      await recordHistory(handle, 'sftrun-trainer-died');
    });
  });

  test.concurrent('pause, resume and stop after the current step, as a TrainRun\'s; continue-as-new keeps the data and the trainer', async () => {
    await withWorkers({ sft: {}, orchestrator: { max_steps: 6 }, trainMs: 300 }, async (f, client) => {
      const handle = await start(client, { continueAsNewEvery: 2 });
      await waitFor(async () => f.events.some((e) => e.what === 'train-start'));
      expect(await handle.executeUpdate(pauseUpdate)).toBe('paused');
      await waitFor(async () => (await handle.query(progressQuery)).phase === 'idle' && f.records.length >= 1);
      const at = f.records.length;
      await sleep(700);
      expect(f.records.length).toBe(at);
      expect((await handle.query(progressQuery)).status).toBe('paused');
      expect(await handle.executeUpdate(resumeUpdate)).toBe('running');
      await waitFor(async () => f.records.length >= 3);
      await handle.executeUpdate(stopAfterCurrentStepUpdate);
      const result = await handle.result();
      expect(result.stopped).toBe('stopped-by-request');
      expect(result.stepsCompleted).toBeLessThan(6);
      expect([...f.applied.values()].every((c) => c === 1)).toBe(true);
      // A later execution finds the frozen data again (the real activity returns the stored copy).
      expect(f.sftPrepares.length).toBeGreaterThan(1);
      expect(new Set(f.sftBatches.map((b) => b.step)).size).toBe(f.sftBatches.length);
      await recordHistory(handle, 'sftrun-pause-stop');
    });
  });

  test.concurrent('a config without [sft] is refused with the fix', async () => {
    await withWorkers({}, async (_f, client) => {
      const handle = await start(client);
      const err = await handle.result().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkflowFailedError);
      expect(String((err as WorkflowFailedError).cause?.message)).toMatch(/an SftRun needs an \[sft\] section .*Fix: add it/);
    });
  });
});
