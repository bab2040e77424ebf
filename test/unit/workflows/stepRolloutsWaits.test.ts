/**
 * StepRollouts' waits (issue 25, holes 1-4) against a real Temporal dev server with fake
 * activities: a store outage at storeRolloutSummaries and in a rollout's trajectory write,
 * inference down inside the step, and no rollout worker at all. Each fault is a wait with a
 * status the parent shows, and the step completes by itself once the fault is fixed.
 * RATCHET_RECORD_HISTORIES=1 records the step's histories for the replay test (infra/record-histories.sh).
 */
import type { Client, WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { describeWithStack } from '../../helpers/stack';
import { SA, progressQuery } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import type { RolloutProgressSignal, TrainRunInput } from '../../../src/contracts';
import { inNamespace, makeFakes, useFakeWorld, withFakeWorkers, type FakeOptions, type FakeStack } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';

jest.setTimeout(180_000);

// Short limits stand in for days: 2 tries in the step, then a child that continues as new every 2 tries.
const shortOutage = { handoffAfter: 2, perExecution: 2, capS: 1 };

describeWithStack('StepRollouts waits (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait, so they run at once (test.concurrent), each in a namespace of its own. No more tests
  // than namespaces: each test's is fresh, so no earlier test's rollout worker has polled its queue.
  const world = useFakeWorld({ concurrent: 5 });

  /** The fake stack in a namespace of its own around fn; with `rolloutWorker: false` no rollout worker runs until fn starts one. */
  const withWorkers = <T>(opts: FakeOptions & { rolloutWorker?: boolean }, fn: (s: FakeStack) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, makeFakes(opts), { trainers: ['w1', 'w2'], rollouts: opts.rolloutWorker !== false, namespace: ns }, (_f, stack) => fn(stack)));

  let n = 0;
  async function start(client: Client, input: Partial<TrainRunInput> = {}): Promise<WorkflowHandleWithFirstExecutionRunId<typeof TrainRun>> {
    const runId = `waits-${process.pid}-${++n}`;
    return client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, ...input }],
    });
  }

  const rolloutsOf = (client: Client, handle: WorkflowHandle, step = 0) => client.workflow.getHandle(`${handle.workflowId}-step-${step}-rollouts`);

  /** The children of type `type` a workflow started, and how many executions each child's chain has. */
  async function children(client: Client, handle: WorkflowHandle, type: string): Promise<{ id: string; executions: number }[]> {
    const ids = ((await handle.fetchHistory()).events ?? [])
      .map((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)
      .filter((a) => a?.workflowType?.name === type)
      .map((a) => a!.workflowId!);
    return Promise.all(ids.map(async (id) => {
      const runs: string[] = [];
      for await (const w of client.workflow.list({ query: `WorkflowId = '${id}'` })) runs.push(w.runId);
      return { id, executions: runs.length };
    }));
  }

  /** Activities of `type` scheduled in a workflow's own history. */
  async function scheduled(handle: WorkflowHandle, type: string): Promise<number> {
    return ((await handle.fetchHistory()).events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type).length;
  }

  /** The rolloutProgress signals a TrainRun received, in order. */
  async function progressSignals(handle: WorkflowHandle): Promise<RolloutProgressSignal[]> {
    return ((await handle.fetchHistory()).events ?? [])
      .map((e) => e.workflowExecutionSignaledEventAttributes)
      .filter((a) => a?.signalName === 'rolloutProgress')
      .map((a) => defaultPayloadConverter.fromPayload<RolloutProgressSignal>(a!.input!.payloads![0]!));
  }

  test.concurrent('no rollout worker: the run shows waiting-for-rollout-workers, then goes on by itself when one starts', async () => {
    await withWorkers({ rolloutWorker: false, orchestrator: { max_steps: 1 } }, async ({ fakes, client, startRolloutWorker }) => {
      const handle = await start(client, { rolloutWorkersWatchS: 1 });
      await waitForStatus(handle, 'waiting-for-rollout-workers');
      expect(await handle.query(progressQuery)).toMatchObject({ phase: 'rollouts', rolloutsDone: 0, rolloutsTotal: 6 });
      expect(fakes.events.filter((e) => e.what === 'rollout-start')).toHaveLength(0);
      startRolloutWorker();
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      // Every rollout ran once: the wait used no attempt and lost nothing from the window.
      expect(fakes.events.filter((e) => e.what === 'rollout-start')).toHaveLength(6);
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([6]);
      // Every chunk progress signal carries the flag: its changes are what the parent shows.
      const flags = (await progressSignals(handle)).map((s) => s.waitingForRolloutWorkers).filter((f) => f !== undefined);
      expect(flags.filter((f, i) => i === 0 || f !== flags[i - 1])).toEqual([true, false]);
      expect((await handle.query(progressQuery)).status).toBe('completed');
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-rollout-workers-wait');
      await recordHistory(handle, 'trainrun-rollout-workers-wait');
    });
  });

  test.concurrent('a store outage exactly at storeRolloutSummaries: the run waits (waiting-for-store), then completes', async () => {
    await withWorkers({ summariesStoreDownTimes: 5, orchestrator: { max_steps: 1 } }, async ({ fakes, client }) => {
      const handle = await start(client, { outageWaits: shortOutage });
      await waitForStatus(handle, 'waiting-for-store');
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      expect(fakes.events.filter((e) => e.what === 'summaries-store-down')).toHaveLength(5);
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([6]);
      expect([...fakes.applied.values()]).toEqual([1]);
      // 2 tries in the step's history, the rest in one OutageWait child that continued as new.
      expect(await scheduled(rolloutsOf(client, handle), 'storeRolloutSummaries')).toBe(2);
      const waits = await children(client, rolloutsOf(client, handle), 'OutageWait');
      expect(waits).toHaveLength(1);
      expect(waits[0]!.executions).toBeGreaterThan(1);
      expect((await handle.query(progressQuery)).status).toBe('completed');
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-summaries-store-wait');
    });
  });

  test.concurrent('a rollout\'s trajectory write finds the store down for a while: waiting-for-store, no attempt used, every rollout kept', async () => {
    await withWorkers({ rolloutStoreDownTimes: 5, orchestrator: { max_steps: 1 } }, async ({ fakes, client }) => {
      const handle = await start(client, { outageWaits: shortOutage });
      await waitForStatus(handle, 'waiting-for-store');
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      expect(fakes.events.filter((e) => e.what === 'rollout-store-down')).toHaveLength(5);
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([6]);
      expect((await handle.query(progressQuery)).status).toBe('completed');
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-rollout-store-wait');
    });
  });

  test.concurrent('inference down inside the step: one wait for every lane, moved to an InferenceWait child; the step history stays small', async () => {
    await withWorkers({ inferenceDownAtStart: true, inferenceDownTimes: 5, orchestrator: { max_steps: 1 } }, async ({ fakes, client }) => {
      const handle = await start(client, { outageWaits: shortOutage });
      await waitForStatus(handle, 'waiting-for-inference');
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([6]);
      expect([...fakes.applied.values()]).toEqual([1]);
      // Four lanes failed at once; they shared one wait: 2 syncs in the step, the rest in the child.
      expect(await scheduled(rolloutsOf(client, handle), 'syncWeights')).toBe(2);
      const waits = await children(client, rolloutsOf(client, handle), 'InferenceWait');
      expect(waits).toHaveLength(1);
      expect(waits[0]!.executions).toBe(2);
      expect((await handle.query(progressQuery)).status).toBe('completed');
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-inference-wait');
    });
  });
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until the run reports `status`, then checks the Web UI's search attribute says the same. */
async function waitForStatus(handle: WorkflowHandle<typeof TrainRun>, status: string): Promise<void> {
  await waitFor(async () => (await handle.query(progressQuery)).status === status);
  expect((await handle.describe()).typedSearchAttributes.get(SA.status)).toBe(status);
}

async function waitFor(pred: () => Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(100);
  }
}
