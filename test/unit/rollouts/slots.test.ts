/**
 * Issue 39, time queued is not time running: a rollout worker's activity slot supplier
 * (src/rollouts/slots.ts) lets a poll take a task only when one of its rollouts can start at once.
 * The supplier is driven here as the Temporal worker drives it (reserve, mark used, release);
 * test/unit/workflows/stepRollouts.test.ts checks it under a real worker and dev server.
 *
 * The "rollout admission (real worker, real dev server, real chunk activity)" block:
 * Issue 39, time queued is not time running, under a real Temporal worker and dev server: the rollout
 * worker's admission (src/rollouts/slots.ts) leaves a chunk it cannot start in the task queue, where
 * another worker takes it; every chunk's first rollout starts as its activity starts. The control runs
 * the worker option before it (maxConcurrentActivityTaskExecutions = slots): worker A takes both chunks
 * (with the old slots, the second waited a whole rollout inside A, under its start-to-close).
 * Real chunk activity (src/activities/rolloutChunk.ts) and local store; the rollouts are fakes that sleep.
 */
import type { ActivitySlotInfo, CustomSlotSupplier, SlotPermit } from '@temporalio/worker';
import { RolloutSlots } from '../../../src/rollouts/slots';
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { describeWithStack } from '../../helpers/stack';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { StepManifest } from '../../../src/contracts/manifest';
import type { ChunkProgress, RolloutChunkInput } from '../../../src/contracts/chunks';
import { RolloutSummary } from '../../../src/contracts/trajectory';
import { Context } from '@temporalio/activity';
import type { AdmissionProbe, TimeoutProbe } from '../../fixtures/workflows/admissionProbe';

jest.setTimeout(120_000); // the longest limit of the blocks merged here

const tick = () => new Promise((r) => setImmediate(r));
const used: ActivitySlotInfo = { type: 'activity', activityType: 'rolloutChunk' };
const ctx = { slotType: 'activity' as const, taskQueue: 'ratchet-rollout', workerIdentity: 'w', workerBuildId: '', isSticky: false };

function supplierOf(slots: RolloutSlots): CustomSlotSupplier<ActivitySlotInfo> {
  return slots.admission().tuner.activityTaskSlotSupplier as unknown as CustomSlotSupplier<ActivitySlotInfo>;
}

/** A poll's reservation, and whether it has a permit yet. */
function reserve(s: CustomSlotSupplier<ActivitySlotInfo>, abort = new AbortController()) {
  const r = { granted: false, permit: undefined as SlotPermit | undefined, error: undefined as unknown, abort };
  s.reserveSlot(ctx, abort.signal).then((p) => { r.granted = true; r.permit = p; }, (e: unknown) => { r.error = e; });
  return r;
}

/** A rollout that runs until `end()`. */
function rollout() {
  let end!: () => void;
  const done = new Promise<void>((r) => { end = r; });
  return { end, fn: () => done };
}

describe("a rollout worker's admission of activities", () => {
  test('a chunk wider than the free slots: the worker takes nothing more until its rollouts stop waiting and a slot is free', async () => {
    const slots = new RolloutSlots(2);
    const s = supplierOf(slots);
    const p1 = reserve(s);
    await tick();
    expect(p1.granted).toBe(true);
    // One poll at a time: a second permit waits, though a slot is free.
    const p2 = reserve(s);
    await tick();
    expect(p2.granted).toBe(false);
    // The first poll brings a chunk of 4 (no cap): 2 run at once, 2 wait for slots.
    s.markSlotUsed({ slotInfo: used, permit: p1.permit! });
    const lease = slots.open(4);
    const rs = [rollout(), rollout(), rollout(), rollout()];
    const started: number[] = [];
    const runs = rs.map((r, i) => lease.run(() => { started.push(i); return r.fn(); }));
    await tick();
    expect(started).toEqual([0, 1]);
    expect(slots.queued).toBe(2);
    expect(p2.granted).toBe(false);
    rs[0]!.end();
    await tick();
    expect(started).toEqual([0, 1, 2]);
    expect(p2.granted).toBe(false); // rollout 3 still waits: the running chunk is served first
    rs[1]!.end();
    await tick();
    expect(started).toEqual([0, 1, 2, 3]);
    expect(p2.granted).toBe(false); // both slots run the chunk's rollouts
    rs[2]!.end();
    await tick();
    expect(p2.granted).toBe(true); // a slot is free and nothing waits: the next chunk can start at once
    rs[3]!.end();
    await Promise.all(runs);
    lease.close();
  });

  test("an admitted chunk's first rollout starts at once, on its own slot, whatever else is running", async () => {
    const slots = new RolloutSlots(2);
    const s = supplierOf(slots);
    const a = reserve(s);
    await tick();
    s.markSlotUsed({ slotInfo: used, permit: a.permit! });
    const la = slots.open(1);
    const ra = rollout();
    const runA = la.run(ra.fn);
    await tick();
    // One slot left: a second chunk is admitted and starts at once.
    const b = reserve(s);
    await tick();
    expect(b.granted).toBe(true);
    s.markSlotUsed({ slotInfo: used, permit: b.permit! });
    const lb = slots.open(2);
    const started: string[] = [];
    const rb = [rollout(), rollout()];
    const runsB = rb.map((r, i) => lb.run(() => { started.push(`b${i}`); return r.fn(); }));
    await tick();
    expect(started).toEqual(['b0']); // its second rollout waits for a slot; its first never does
    ra.end();
    await runA;
    la.close();
    await tick();
    expect(started).toEqual(['b0']); // chunk A still holds its slot until its task is done (its summaries written)
    s.releaseSlot({ slotInfo: used, permit: a.permit! });
    await tick();
    expect(started).toEqual(['b0', 'b1']);
    for (const r of rb) r.end();
    await Promise.all(runsB);
    lb.close();
  });

  test('a chunk-mate waiting on the run\'s cap takes the slot of the rollout that ended: no poll slips in between', async () => {
    const slots = new RolloutSlots(1);
    const s = supplierOf(slots);
    const a = reserve(s);
    await tick();
    s.markSlotUsed({ slotInfo: used, permit: a.permit! });
    const lease = slots.open(1);
    const rs = [rollout(), rollout()];
    const runs = rs.map((r) => lease.run(r.fn));
    const b = reserve(s);
    await tick();
    rs[0]!.end();
    await tick();
    expect(b.granted).toBe(false);
    rs[1]!.end();
    await Promise.all(runs);
    lease.close();
    s.releaseSlot({ slotInfo: used, permit: a.permit! });
    await tick();
    expect(b.granted).toBe(true);
  });

  test('a poll that brought nothing gives its slot back; an aborted reservation rejects with the reason', async () => {
    const slots = new RolloutSlots(1);
    const s = supplierOf(slots);
    const a = reserve(s);
    await tick();
    const b = reserve(s);
    const c = reserve(s);
    await tick();
    expect([b.granted, c.granted]).toEqual([false, false]);
    b.abort.abort(new Error('poller stopped'));
    await tick();
    expect((b.error as Error).message).toBe('poller stopped');
    s.releaseSlot({ permit: a.permit! });
    await tick();
    expect(c.granted).toBe(true);
    expect(b.granted).toBe(false);
  });

  test('without a supplier (tests, the bench), leases still share the slots', async () => {
    const slots = new RolloutSlots(2);
    const l1 = slots.open(2);
    const l2 = slots.open(2);
    let now = 0;
    let peak = 0;
    const one = () => async () => { peak = Math.max(peak, ++now); await tick(); now--; };
    await Promise.all([l1.run(one()), l1.run(one()), l2.run(one()), l2.run(one())]);
    expect(peak).toBe(2);
  });

  test('a size that is not a whole number >= 1 is refused, naming the setting', () => {
    expect(() => new RolloutSlots(0)).toThrow(/RATCHET_ROLLOUT_SLOTS/);
    expect(() => new RolloutSlots(Number('four'))).toThrow(/not a whole number >= 1/);
  });
});

describeWithStack('rollout admission (real worker, real dev server, real chunk activity)', ['temporalBinary'], () => {
  const ROLLOUT_MS = 2000;
  const manifest = StepManifest.parse({
    version: 1, runId: 'admit-run', step: 0, policyVersion: 0, modelName: 'm', taskSetDir: '/fake', seed: 1, rolloutsPerExample: 2, maxConcurrentRollouts: 2,
    tasks: [0, 1].map((g) => ({ envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: `t${g}`, groupId: `s0-g${g}` })),
    sampling: { max_tokens: 8 }, envs: [{ args: { max_tokens: 64, max_tool_calls: 3, max_turns: 3 }, rubric: {} }], sandbox: {},
    inferenceBaseUrls: ['http://127.0.0.1:9/v1'], liveness: { heartbeat_every_s: 1, stall_s: 60 },
  });

  interface Seen { chunk: number; worker: string; activityAt: number; firstRolloutAt?: number }

  // The shared fake world's server, and the probe workflow's bundle from its cache (no webpack run per suite).
  const world = useFakeWorld({ workflowsPath: require.resolve('../../fixtures/workflows/admissionProbe') });
  let store: LocalArtifactStore;
  let chunks: RolloutChunkInput[];

  beforeAll(async () => {
    store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-admit-')));
    const ref = await store.putJson(runKeys.stepManifest('admit-run', 0, 'ef'.repeat(32)), manifest);
    // Two chunks of 2 rollouts (the run's cap 2): each fills a 2-slot worker.
    chunks = [{ manifest: ref, start: 0, end: 2 }, { manifest: ref, start: 2, end: 4 }];
  });

  /** A rollout worker named `name` on `slots`, with the worker options `optionsOf` gives; records what its chunks did. */
  async function rolloutWorker(name: string, taskQueue: string, seen: Seen[], optionsOf: (slots: RolloutSlots) => Partial<WorkerOptions> & { close?: () => void }) {
    const slots = new RolloutSlots(2);
    const chunk = createChunkActivity({
      store,
      slots,
      runOne: async (input) => {
        const i = (input.groupId === 's0-g0' ? 0 : 2) + input.rolloutIndex;
        const s = seen.find((x) => x.chunk === (i < 2 ? 0 : 1))!;
        s.firstRolloutAt ??= Date.now();
        await new Promise((r) => setTimeout(r, ROLLOUT_MS));
        return RolloutSummary.parse({
          task_id: input.task.instanceId, group_id: input.groupId, rollout_index: input.rolloutIndex, trajectory: { uri: 'file:///x', sha256: 'cd'.repeat(32), bytes: 1 },
          reward: 0, components: {}, stop_reason: 'completed', policy_version: 0, completion_tokens: 1, tool_calls: 0, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
        });
      },
    });
    const { close, ...options } = optionsOf(slots);
    // A host of its own: one connection per worker (the SDK refuses two workers of one queue on one connection).
    const connection = await NativeConnection.connect({ address: world.env.address });
    const w = await Worker.create({
      connection, taskQueue, ...options,
      activities: {
        rolloutChunk: (input: RolloutChunkInput) => {
          seen.push({ chunk: input.start === 0 ? 0 : 1, worker: name, activityAt: Date.now() });
          return chunk.rolloutChunk(input);
        },
      },
    });
    return { w, running: w.run().finally(async () => { close?.(); await connection.close(); }) };
  }

  /** Worker A serves the queue from the start; worker B joins once A has taken its first chunk. */
  async function twoWorkers(taskQueue: string, optionsOf: Parameters<typeof rolloutWorker>[3]): Promise<Seen[]> {
    const seen: Seen[] = [];
    const workers: { w: Worker; running: Promise<void> }[] = [];
    const wf = await Worker.create({ connection: world.env.nativeConnection, taskQueue: `${taskQueue}-wf`, workflowBundle: world.bundle });
    const wfRunning = wf.run();
    try {
      workers.push(await rolloutWorker('A', taskQueue, seen, optionsOf));
      const handle = await world.env.client.workflow.start<typeof AdmissionProbe>('AdmissionProbe', { taskQueue: `${taskQueue}-wf`, workflowId: `${taskQueue}-${Date.now()}`, args: [{ taskQueue, chunks }] });
      while (seen.length === 0) await new Promise((r) => setTimeout(r, 20));
      await new Promise((r) => setTimeout(r, 300));
      workers.push(await rolloutWorker('B', taskQueue, seen, optionsOf));
      expect(await handle.result()).toEqual([2, 2]);
    } finally {
      for (const x of workers) x.w.shutdown();
      wf.shutdown();
      await Promise.all([...workers.map((x) => x.running), wfRunning]);
    }
    return seen.sort((x, y) => x.chunk - y.chunk);
  }

  test('a chunk the worker cannot start stays in the queue and another worker takes it; each chunk starts its rollouts at once', async () => {
    const seen = await twoWorkers('admit-new', (slots) => {
      const admission = slots.admission();
      return { tuner: admission.tuner, close: admission.close };
    });
    expect(seen.map((s) => s.worker).sort()).toEqual(['A', 'B']); // whichever chunk A took, the other went to B
    for (const s of seen) expect(s.firstRolloutAt! - s.activityAt).toBeLessThan(ROLLOUT_MS / 2);
  });

  test('control, the worker option before (activities counted, not rollouts): worker A takes both chunks, B none', async () => {
    const seen = await twoWorkers('admit-old', (slots) => ({ maxConcurrentActivityTaskExecutions: slots.size }));
    expect(seen.map((s) => s.worker)).toEqual(['A', 'A']);
  });

  test('a round that ends in a heartbeat timeout keeps the rollouts its last heartbeat named (the next call passes them in done)', async () => {
    const summary = (i: number) => RolloutSummary.parse({
      task_id: `t${i >> 1}`, group_id: `s0-g${i >> 1}`, rollout_index: i % 2, trajectory: { uri: 'file:///x', sha256: 'cd'.repeat(32), bytes: 1 },
      reward: 0, components: {}, stop_reason: 'completed', policy_version: 0, completion_tokens: 1, tool_calls: 0, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
    });
    const taskQueue = 'timeout-probe';
    // The chunk names rollout 0 finished and 1 on its first try, then its worker freezes: no heartbeat after.
    const rollout = await Worker.create({
      connection: world.env.nativeConnection, taskQueue,
      activities: {
        rolloutChunk: async () => {
          Context.current().heartbeat({ done: [{ i: 0, summary: summary(0) }], tries: [{ i: 1, n: 1 }] } satisfies ChunkProgress);
          await new Promise((r) => setTimeout(r, 3500));
          throw new Error('frozen worker woke up');
        },
      },
    });
    const wf = await Worker.create({ connection: world.env.nativeConnection, taskQueue: `${taskQueue}-wf`, workflowBundle: world.bundle });
    const running = [rollout.run(), wf.run()];
    try {
      const probe = (keep: boolean) => world.env.client.workflow.execute<typeof TimeoutProbe>('TimeoutProbe', {
        taskQueue: `${taskQueue}-wf`, workflowId: `${taskQueue}-${keep}-${Date.now()}`, args: [{ taskQueue, chunk: chunks[0]!, keep }],
      });
      expect(await probe(true)).toEqual([0]);
      // Before the patch: nothing kept, the next call ran rollout 0 again.
      expect(await probe(false)).toBeNull();
    } finally {
      rollout.shutdown();
      wf.shutdown();
      await Promise.all(running);
    }
  });
});
