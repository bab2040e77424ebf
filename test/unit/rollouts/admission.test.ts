/**
 * Issue 39, time queued is not time running, under a real Temporal worker and dev server: the rollout
 * worker's admission (src/rollouts/slots.ts) leaves a chunk it cannot start in the task queue, where
 * another worker takes it; every chunk's first rollout starts as its activity starts. The control runs
 * the worker option before it (maxConcurrentActivityTaskExecutions = slots): worker A takes both chunks
 * (with the old slots, the second waited a whole rollout inside A, under its start-to-close).
 * Real chunk activity (src/activities/rolloutChunk.ts) and local store; the rollouts are fakes that sleep.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { NativeConnection, Worker, type WorkerOptions } from '@temporalio/worker';
import { describeWithStack } from '../../helpers/stack';
import { useFakeWorld } from '../../helpers/fakeWorld';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { RolloutSlots } from '../../../src/rollouts/slots';
import { StepManifest } from '../../../src/contracts/manifest';
import type { ChunkProgress, RolloutChunkInput } from '../../../src/contracts/chunks';
import { RolloutSummary } from '../../../src/contracts/trajectory';
import { Context } from '@temporalio/activity';
import type { AdmissionProbe, TimeoutProbe } from '../../fixtures/workflows/admissionProbe';

jest.setTimeout(120_000);

const ROLLOUT_MS = 2000;
const manifest = StepManifest.parse({
  version: 1, runId: 'admit-run', step: 0, policyVersion: 0, modelName: 'm', taskSetDir: '/fake', seed: 1, rolloutsPerExample: 2, maxConcurrentRollouts: 2,
  tasks: [0, 1].map((g) => ({ envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: `t${g}`, groupId: `s0-g${g}` })),
  sampling: { max_tokens: 8 }, envs: [{ args: { max_tokens: 64, max_tool_calls: 3, max_turns: 3 }, rubric: {} }], sandbox: {},
  inferenceBaseUrls: ['http://127.0.0.1:9/v1'], liveness: { heartbeat_every_s: 1, stall_s: 60 },
});

interface Seen { chunk: number; worker: string; activityAt: number; firstRolloutAt?: number }

describeWithStack('rollout admission (real worker, real dev server, real chunk activity)', ['temporalBinary'], () => {
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
