/**
 * A step's rollouts in chunks over shards (issue 24), against a real Temporal dev server with fake
 * rollouts inside the real chunk activity (src/activities/rolloutChunk.ts) and a real local store:
 * a chunk retried after some of its rollouts finished runs only the missing ones (a Temporal retry,
 * read from the heartbeat details; and a round of the step, read from the failure's details), a
 * full disk in a chunk waits and loses nothing, a shard continues as new, and a large step keeps
 * every execution's history under Temporal's 10,240-event warning.
 * RATCHET_RECORD_HISTORIES=1 records the new paths' histories for the replay test.
 *
 * The "StepRollouts waits (fake activities, real dev server)" block:
 * StepRollouts' waits (issue 25, holes 1-4) against a real Temporal dev server with fake
 * activities: a store outage at storeRolloutSummaries and in a rollout's trajectory write,
 * inference down inside the step, and no rollout worker at all. Each fault is a wait with a
 * status the parent shows, and the step completes by itself once the fault is fixed.
 * RATCHET_RECORD_HISTORIES=1 records the step's histories for the replay test (infra/record-histories.sh).
 */
import type { Client, WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { describeWithStack } from '../../helpers/stack';
import { progressQuery, SA } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import type { RolloutProgressSignal, TrainRunInput } from '../../../src/contracts';
import { inNamespace, makeFakes, useFakeWorld, withFakeWorkers, type FakeOptions, type FakeStack } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';

jest.setTimeout(300_000);

/**
 * One dev server for both blocks, with a namespace for each of their 9 concurrent tests (5 + 4): every test gets one
 * that no test used before (a namespace goes back to the pool after its test, and the pool hands out unused ones first).
 */
const world = useFakeWorld({ concurrent: 9 });

describeWithStack('StepRollouts in chunks and shards (fake rollouts, real chunk activity, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (retry backoffs, round trips), so they run at once (test.concurrent), each in a namespace of its own.

  const withWorkers = <T>(opts: FakeOptions & { rolloutSlots?: number }, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, makeFakes(opts), { trainers: ['w1', 'w2'], mainSlots: 16, rolloutSlots: opts.rolloutSlots ?? 16, namespace: ns },
      (fakes, stack) => fn(fakes, stack.client)));

  let n = 0;
  async function run(client: Client, input: Partial<TrainRunInput> = {}): Promise<WorkflowHandle<typeof TrainRun>> {
    const runId = `chunks-${process.pid}-${++n}`;
    const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, ...input }],
    });
    return handle;
  }
  const rolloutsOf = (client: Client, handle: WorkflowHandle, step = 0) => client.workflow.getHandle(`${handle.workflowId}-step-${step}-rollouts`);

  /** Every execution (run) of a workflow id, oldest first, with its history's event count. */
  async function executions(client: Client, workflowId: string): Promise<{ runId: string; events: number }[]> {
    const runs: string[] = [];
    for await (const w of client.workflow.list({ query: `WorkflowId = '${workflowId}'` })) runs.push(w.runId);
    const out = await Promise.all(runs.map(async (runId) => ({ runId, events: await countEvents(client, workflowId, runId) })));
    return out.reverse();
  }
  async function countEvents(client: Client, workflowId: string, runId?: string): Promise<number> {
    let count = 0;
    let nextPageToken: Uint8Array | undefined;
    do {
      const page = await client.workflowService.getWorkflowExecutionHistory({
        namespace: client.options.namespace, execution: { workflowId, runId }, maximumPageSize: 1000, nextPageToken,
      });
      count += page.history?.events?.length ?? 0;
      nextPageToken = page.nextPageToken?.length ? page.nextPageToken : undefined;
    } while (nextPageToken);
    return count;
  }
  async function progressSignals(handle: WorkflowHandle): Promise<RolloutProgressSignal[]> {
    return ((await handle.fetchHistory()).events ?? [])
      .map((e) => e.workflowExecutionSignaledEventAttributes)
      .filter((a) => a?.signalName === 'rolloutProgress')
      .map((a) => defaultPayloadConverter.fromPayload<RolloutProgressSignal>(a!.input!.payloads![0]!));
  }
  const starts = (fakes: ReturnType<typeof makeFakes>) => {
    const m = new Map<string, number>();
    for (const e of fakes.events.filter((x) => x.what === 'rollout-start')) m.set(e.rollout!, (m.get(e.rollout!) ?? 0) + 1);
    return m;
  };
  async function scheduled(handle: WorkflowHandle, type: string): Promise<number> {
    return ((await handle.fetchHistory()).events ?? []).filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === type).length;
  }

  const chunked = { batch_size: 2, rollouts_per_example: 4, rollouts_per_chunk: 4, max_steps: 1, max_concurrent_rollouts: 8 };

  test.concurrent('a chunk retried after some of its rollouts finished runs only the missing ones', async () => {
    // Chunk [0, 4) (group g0): rollouts 2 and 3 fail on the chunk's first attempt, as if their worker died.
    const failing = (i: { groupId: string; rolloutIndex: number }, attempt: number) => i.groupId === 's0-g0' && i.rolloutIndex >= 2 && attempt === 1;
    await withWorkers({ orchestrator: chunked, chunkFailures: failing }, async (fakes, client) => {
      const handle = await run(client);
      expect(await handle.result()).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      const s = starts(fakes);
      // Each of 0, 1 and of group g1 ran once; 2 and 3 once more on the retry, and only they.
      expect(s.get('s0-g0/0')).toBe(1);
      expect(s.get('s0-g0/1')).toBe(1);
      expect(s.get('s0-g0/2')).toBe(2);
      expect(s.get('s0-g0/3')).toBe(2);
      for (let k = 0; k < 4; k++) expect(s.get(`s0-g1/${k}`)).toBe(1);
      expect(fakes.batches.map((b) => fakes.summariesOf(b).map((x) => `${x.group_id}/${x.rollout_index}`))).toEqual([
        ['s0-g0/0', 's0-g0/1', 's0-g0/2', 's0-g0/3', 's0-g1/0', 's0-g1/1', 's0-g1/2', 's0-g1/3'],
      ]);
      // Two chunk activities, no per-rollout ones; the tasks crossed no history (a manifest ref).
      expect(await scheduled(rolloutsOf(client, handle), 'rolloutChunk')).toBe(2);
      expect(await scheduled(rolloutsOf(client, handle), 'rollout')).toBe(0);
      expect(await scheduled(handle, 'writeStepManifest')).toBe(1);
      expect(await scheduled(handle, 'sampleTasks')).toBe(0);
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-chunk-retried');
      await recordHistory(handle, 'trainrun-chunks');
    });
  });

  test.concurrent('a chunk whose retries ran out runs again in the next round with only its missing rollout', async () => {
    let left = 4; // every attempt of the first call (maximumAttempts 4), then it works
    const failing = (i: { groupId: string; rolloutIndex: number }) => i.groupId === 's0-g1' && i.rolloutIndex === 3 && left-- > 0;
    await withWorkers({ orchestrator: chunked, chunkFailures: failing }, async (fakes, client) => {
      const handle = await run(client);
      expect(await handle.result()).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      const s = starts(fakes);
      expect(s.get('s0-g1/3')).toBe(5);
      for (const k of [0, 1, 2]) expect(s.get(`s0-g1/${k}`)).toBe(1);
      // The round put inference back (a sync) before the chunk's second call.
      expect(await scheduled(rolloutsOf(client, handle), 'rolloutChunk')).toBe(3);
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([8]);
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-chunk-round');
    });
  });

  test.concurrent('a full disk in a chunk: waiting-for-disk, then only the rollout that met it runs again', async () => {
    await withWorkers({ orchestrator: chunked, rolloutDiskFullTimes: 1 }, async (fakes, client) => {
      const handle = await run(client, { outageWaits: { handoffAfter: 2, perExecution: 2, capS: 1 } });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      expect(fakes.events.filter((e) => e.what === 'rollout-disk-full')).toHaveLength(1);
      expect(fakes.events.filter((e) => e.what === 'rollout-start')).toHaveLength(9);
      const flags = (await progressSignals(handle)).map((x) => x.waitingForDisk).filter((f) => f !== undefined);
      expect(flags).toContain(true);
      expect(flags.at(-1)).toBe(false);
      expect((await handle.query(progressQuery)).status).toBe('completed');
      await recordHistory(rolloutsOf(client, handle), 'steprollouts-chunk-disk-wait');
    });
  });

  test.concurrent('shards: a step spread over shard children, each continuing as new, summaries in rollout order', async () => {
    const orchestrator = { batch_size: 8, rollouts_per_example: 4, rollouts_per_chunk: 2, chunks_per_shard: 8, max_steps: 1, max_concurrent_rollouts: 8 };
    await withWorkers({ orchestrator }, async (fakes, client) => {
      const handle = await run(client, { shardEventsBeforeContinue: 40 });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      const step = rolloutsOf(client, handle);
      const shards = [0, 1].map((s) => `${step.workflowId}-shard-${s}`);
      for (const id of shards) expect((await executions(client, id)).length).toBeGreaterThan(1);
      const summaries = fakes.batches.map((b) => fakes.summariesOf(b))[0]!;
      expect(summaries).toHaveLength(32);
      expect(summaries.map((x) => `${x.group_id}/${x.rollout_index}`)).toEqual(
        Array.from({ length: 32 }, (_, i) => `s0-g${Math.floor(i / 4)}/${i % 4}`));
      expect(fakes.events.filter((e) => e.what === 'rollout-start')).toHaveLength(32);
      // The parent heard the step's progress through StepRollouts.
      expect((await progressSignals(handle)).at(-1)).toMatchObject({ done: 32, total: 32 });
      // The cost ledger's temporal_child_events against the server's own event counts of StepRollouts and
      // every shard execution: each read before its closing events (task completed, completed/continued).
      const runs = [...await executions(client, step.workflowId), ...(await Promise.all(shards.map((id) => executions(client, id)))).flat()];
      const served = runs.reduce((a, r) => a + r.events, 0);
      const ledger = fakes.records[0]!.record.cost!.temporal_child_events;
      expect(ledger).toBeLessThanOrEqual(served);
      expect(ledger).toBeGreaterThanOrEqual(served - 3 * runs.length);
      const first = (await executions(client, shards[0]!))[0]!;
      await recordHistory(client.workflow.getHandle(shards[0]!, first.runId), 'rolloutshard-continued-as-new');
      await recordHistory(step, 'steprollouts-shards');
    });
  });

  test.concurrent('a large step: no execution holds more than 10,240 events', async () => {
    const total = Number(process.env.RATCHET_CHUNKS_TEST_ROLLOUTS ?? 4096);
    const orchestrator = { batch_size: total / 8, rollouts_per_example: 8, rollouts_per_chunk: 16, chunks_per_shard: 64, max_steps: 1, max_concurrent_rollouts: 1024 };
    await withWorkers({ orchestrator, rolloutSlots: 64 }, async (fakes, client) => {
      const t0 = Date.now();
      const handle = await run(client);
      await handle.result();
      const ms = Date.now() - t0;
      const step = rolloutsOf(client, handle);
      const ids = [handle.workflowId, step.workflowId, ...Array.from({ length: Math.ceil(total / 16 / 64) }, (_, s) => `${step.workflowId}-shard-${s}`)];
      const all = (await Promise.all(ids.map(async (id) => (await executions(client, id)).map((e) => ({ id, ...e }))))).flat();
      const events = all.reduce((a, e) => a + e.events, 0);
      const largest = Math.max(...all.map((e) => e.events));
      console.warn(`chunks: ${total} rollouts in ${ms} ms; ${all.length} executions, ${events} events (${(events / total).toFixed(3)} a rollout), largest history ${largest}`);
      expect(fakes.batches.map((b) => fakes.summariesOf(b).length)).toEqual([total]);
      expect(largest).toBeLessThan(10_240);
      // Per-rollout activities cost ~3.2 events a rollout (BENCHMARKS.md); chunks of 16 a small fraction.
      expect(events / total).toBeLessThan(0.5);
    });
  });
});

describeWithStack('StepRollouts waits (fake activities, real dev server)', ['temporalBinary'], () => {
  // Short limits stand in for days: 2 tries in the step, then a child that continues as new every 2 tries.
  const shortOutage = { handoffAfter: 2, perExecution: 2, capS: 1 };

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

  // The tests mostly wait, so they run at once (test.concurrent), each in a namespace of its own. No more tests
  // than namespaces (the file's world below): each test's is fresh, so no earlier test's rollout worker has polled its queue.

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
