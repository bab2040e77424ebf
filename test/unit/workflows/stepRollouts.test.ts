/**
 * A step's rollouts in chunks over shards (issue 24), against a real Temporal dev server with fake
 * rollouts inside the real chunk activity (src/activities/rolloutChunk.ts) and a real local store:
 * a chunk retried after some of its rollouts finished runs only the missing ones (a Temporal retry,
 * read from the heartbeat details; and a round of the step, read from the failure's details), a
 * full disk in a chunk waits and loses nothing, a shard continues as new, and a large step keeps
 * every execution's history under Temporal's 10,240-event warning.
 * RATCHET_RECORD_HISTORIES=1 records the new paths' histories for the replay test.
 */
import type { Client, WorkflowHandle } from '@temporalio/client';
import { defaultPayloadConverter } from '@temporalio/common';
import { describeWithStack } from '../../helpers/stack';
import { progressQuery } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import type { RolloutProgressSignal, TrainRunInput } from '../../../src/contracts';
import { inNamespace, makeFakes, useFakeWorld, withFakeWorkers, type FakeOptions } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';

jest.setTimeout(300_000);

describeWithStack('StepRollouts in chunks and shards (fake rollouts, real chunk activity, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (retry backoffs, round trips), so they run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });

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
