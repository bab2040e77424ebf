/**
 * The rollout chunk activity (src/activities/rolloutChunk.ts): real chunk activity and local store, fake rollouts.
 *
 * The "a retried chunk and the rollouts an earlier attempt stored" block:
 * A retried chunk adopts the rollouts an earlier attempt finished and stored but never named in
 * a heartbeat (heartbeats are throttled: a worker killed just after a rollout finished may have
 * sent none for it). Real chunk activity, real local store; the rollouts themselves are fakes
 * that count their runs.
 *
 * The "a rollout's tries in a chunk" block:
 * Issue 39, item 5: a rollout's infrastructure failures count against its own tries, not its
 * chunk's attempt number. A rollout first run on the chunk's 3rd attempt (its chunk-mates failed
 * twice, or it waited behind them) has had no try before and is retried, not dropped, at its first
 * infrastructure failure. Real chunk activity and local store, under Temporal's mock activity context.
 *
 * The "rollouts at once inside one chunk" block:
 * A chunk honours the run's orchestrator.max_concurrent_rollouts (carried by the step manifest):
 * the step keeps at least one chunk in flight, so before the manifest carried it a setting below the
 * chunk's size was exceeded (the smoke config sets 4; its chunk of 8 ran all 8 at once, unlike the per-rollout path).
 * Real chunk activity and local store; the rollouts are fakes that record how many run at once.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { StepManifest, rolloutInputOf, type StepManifestInput } from '../../../src/contracts/manifest';
import { RolloutSummary, Trajectory } from '../../../src/contracts/trajectory';
import { runKeys } from '../../../src/artifacts/keys';
import { saveTrajectory } from '../../../src/rollouts/record';
import type { RolloutInput } from '../../../src/contracts/rollout';
import pino from 'pino';
import { MockActivityEnvironment } from '@temporalio/testing';
import type { ChunkProgress } from '../../../src/contracts/chunks';
import { INFRA_ATTEMPTS, retryInfrastructureFailure } from '../../../src/rollouts/errors';
import { RolloutSlots } from '../../../src/rollouts/slots';

describe('a retried chunk and the rollouts an earlier attempt stored', () => {
  const manifest = StepManifest.parse({
    version: 1, runId: 'adopt-run', step: 3, policyVersion: 3, modelName: 'm', taskSetDir: '/fake', seed: 7, rolloutsPerExample: 2,
    tasks: [0, 1].map((g) => ({ envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: `t${g}`, groupId: `s3-g${g}` })),
    sampling: { max_tokens: 8 }, envs: [{ args: { max_tokens: 64, max_tool_calls: 3, max_turns: 3 }, rubric: {} }], sandbox: {}, inferenceBaseUrls: ['http://127.0.0.1:9/v1'],
    liveness: { heartbeat_every_s: 1, stall_s: 60 },
  });

  function trajectoryFor(r: RolloutInput, reward: number): Trajectory {
    return Trajectory.parse({
      format: 'ratchet.trajectory/v1', run_id: r.runId, step: r.step, env_id: r.envId, task_id: r.task.instanceId, group_id: r.groupId,
      rollout_index: r.rolloutIndex, model: 'm', tools: [], messages: [{ role: 'user', content: 'find it' }], turns: [], stop_reason: 'completed',
      final: {}, reward: { total: reward, components: { f1: reward } },
      stats: { prompt_tokens: 11, completion_tokens: 5, tool_calls: 2, tool_errors: 0, commands: ['rg', 'rg', 'cat'], tools_used: { shell: 2 } },
      timing: { model_ms: 10, tools_ms: 20, sandbox_ms: 30, total_ms: 70 },
    });
  }

  let store: LocalArtifactStore;
  let runs: string[];
  let manifestRef: Awaited<ReturnType<LocalArtifactStore['putJson']>>;
  const activity = () => createChunkActivity({
    store,
    runOne: async (input) => {
      runs.push(`${input.groupId}/${input.rolloutIndex}`);
      const { summary } = await (async () => {
        const t = trajectoryFor(input, 0.25);
        const ref = await saveTrajectory(store, t);
        return { summary: RolloutSummary.parse({ task_id: t.task_id, group_id: t.group_id, rollout_index: t.rollout_index, trajectory: ref, reward: 0.25, components: {}, stop_reason: 'completed', policy_version: input.policyVersion, completion_tokens: 5, tool_calls: 2, model_ms: 1, tools_ms: 1, sandbox_ms: 1 }) };
      })();
      return summary;
    },
  }).rolloutChunk;

  beforeEach(async () => {
    store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-adopt-')));
    runs = [];
    manifestRef = await store.putJson(runKeys.stepManifest('adopt-run', 3, 'cd'.repeat(32)), manifest);
  });

  test('a stored rollout is adopted (its summary rebuilt from the trajectory), only the others run', async () => {
    // An earlier attempt finished rollout 1 of group g0 (chunk index 1) and stored it; no heartbeat named it.
    const earlier = trajectoryFor(rolloutInputOf(manifest, 1), 0.75);
    const ref = await saveTrajectory(store, earlier);
    const res = await activity()({ manifest: manifestRef, start: 0, end: 4, done: [] });
    expect(runs.sort()).toEqual(['s3-g0/0', 's3-g1/0', 's3-g1/1']);
    expect(res).toMatchObject({ count: 4, ran: 3 });
    const summaries = RolloutSummary.array().parse(await store.getJson(res.summaries));
    expect(summaries.map((s) => `${s.group_id}/${s.rollout_index}`)).toEqual(['s3-g0/0', 's3-g0/1', 's3-g1/0', 's3-g1/1']);
    // Independent of summaryOf: the numbers are the stored trajectory's, the version the manifest's.
    expect(summaries[1]).toEqual({
      task_id: 't0', group_id: 's3-g0', rollout_index: 1, trajectory: { uri: ref.uri, sha256: ref.sha256, bytes: ref.bytes },
      reward: 0.75, components: { f1: 0.75 }, stop_reason: 'completed', policy_version: 3, completion_tokens: 5, tool_calls: 2,
      model_ms: 10, tools_ms: 20, sandbox_ms: 30, prompt_tokens: 11, tools_used: { shell: 2 }, commands: { rg: 2, cat: 1 },
    });
  });

  test('a torn object (its bytes do not match its key\'s hash) or another rollout\'s record is not adopted', async () => {
    const r = rolloutInputOf(manifest, 1);
    const key = runKeys.trajectory(r.runId, r.step, r.groupId, r.rolloutIndex, 'ab'.repeat(32));
    await store.put(key, JSON.stringify(trajectoryFor(r, 0.75))); // the hash in its name is not its content's
    // A trajectory stored under rollout 1's name but recording rollout 0.
    const other = trajectoryFor(rolloutInputOf(manifest, 0), 0.5);
    const text = JSON.stringify(other);
    const sha = (await import('node:crypto')).createHash('sha256').update(text).digest('hex');
    await store.put(runKeys.trajectory(r.runId, r.step, r.groupId, 1, sha), text);
    await activity()({ manifest: manifestRef, start: 0, end: 2, done: [] });
    expect(runs.sort()).toEqual(['s3-g0/0', 's3-g0/1']);
  });

  test('a first call lists nothing and runs every rollout', async () => {
    await saveTrajectory(store, trajectoryFor(rolloutInputOf(manifest, 0), 0.75));
    const res = await activity()({ manifest: manifestRef, start: 0, end: 2 });
    expect(res.ran).toBe(2);
    expect(runs.sort()).toEqual(['s3-g0/0', 's3-g0/1']);
  });
});

describe("a rollout's tries in a chunk", () => {
  const manifest = StepManifest.parse({
    version: 1, runId: 'tries-run', step: 0, policyVersion: 0, modelName: 'm', taskSetDir: '/fake', seed: 7, rolloutsPerExample: 2,
    tasks: [0, 1].map((g) => ({ envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: `t${g}`, groupId: `s0-g${g}` })),
    sampling: { max_tokens: 8 }, envs: [{ args: { max_tokens: 64, max_tool_calls: 3, max_turns: 3 }, rubric: {} }], sandbox: {}, inferenceBaseUrls: ['http://127.0.0.1:9/v1'],
    liveness: { heartbeat_every_s: 1, stall_s: 60 },
  });
  const summary = (i: number) => RolloutSummary.parse({
    task_id: `t${i >> 1}`, group_id: `s0-g${i >> 1}`, rollout_index: i % 2, trajectory: { uri: 'file:///x', sha256: 'a'.repeat(64), bytes: 1 },
    reward: 0, components: {}, stop_reason: 'completed', policy_version: 0, completion_tokens: 1, tool_calls: 0, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
  });

  test("on the chunk's 3rd attempt, a rollout never run before gets its 1st try; one tried twice gets its 3rd", async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-tries-')));
    const ref = await store.putJson(runKeys.stepManifest('tries-run', 0, 'ab'.repeat(32)), manifest);
    const seen = new Map<number, number>();
    const { rolloutChunk } = createChunkActivity({
      store,
      runOne: async (input, _live, attempt) => {
        const i = input.groupId === 's0-g0' ? input.rolloutIndex : 2 + input.rolloutIndex;
        seen.set(i, attempt);
        return summary(i);
      },
    });
    // Attempts 1 and 2 ran rollout 0 twice (both failed) and finished 1; 2 and 3 were never started.
    const beat: ChunkProgress = { done: [{ i: 1, summary: summary(1) }], tries: [{ i: 0, n: 2 }] };
    const env = new MockActivityEnvironment({ attempt: 3, heartbeatDetails: beat });
    await env.run(rolloutChunk, { manifest: ref, start: 0, end: 4 });
    expect([...seen].sort((a, b) => a[0] - b[0])).toEqual([[0, 3], [2, 1], [3, 1]]);
  });

  test("a failure on the rollout's first try is retried, on its last recorded as dropped (the chunk's attempt does not matter)", () => {
    const log = pino({ level: 'silent' });
    // Called outside an activity, currentAttempt() would say the last attempt: the rollout's own try decides.
    expect(() => retryInfrastructureFailure('dockerd went away', log, 1)).toThrow(/infrastructure failure \(attempt 1\)/);
    expect(() => retryInfrastructureFailure('dockerd went away', log, INFRA_ATTEMPTS)).not.toThrow();
  });
});

describe('rollouts at once inside one chunk', () => {
  const base: StepManifestInput = {
    version: 1, runId: 'cap-run', step: 0, policyVersion: 0, modelName: 'm', taskSetDir: '/fake', seed: 1, rolloutsPerExample: 4,
    tasks: [0, 1].map((g) => ({ envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: `t${g}`, groupId: `s0-g${g}` })),
    sampling: { max_tokens: 8 }, envs: [{ args: { max_tokens: 64, max_tool_calls: 3, max_turns: 3 }, rubric: {} }], sandbox: {},
    inferenceBaseUrls: ['http://127.0.0.1:9/v1'], liveness: { heartbeat_every_s: 1, stall_s: 60 },
  };

  /** Runs rollouts [0, 8) of a manifest; returns the most that were running at one time. */
  async function peakInFlight(extra: Partial<StepManifestInput>, slots?: RolloutSlots): Promise<{ peak: number; ran: number }> {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-cap-')));
    const ref = await store.putJson(runKeys.stepManifest('cap-run', 0, 'ab'.repeat(32)), StepManifest.parse({ ...base, ...extra }));
    let now = 0;
    let peak = 0;
    const { rolloutChunk } = createChunkActivity({
      store,
      slots,
      runOne: async (input) => {
        peak = Math.max(peak, ++now);
        await new Promise((r) => setTimeout(r, 20));
        now--;
        return RolloutSummary.parse({
          task_id: input.task.instanceId, group_id: input.groupId, rollout_index: input.rolloutIndex, trajectory: { uri: 'file:///x', sha256: 'cd'.repeat(32), bytes: 1 },
          reward: 0, components: {}, stop_reason: 'completed', policy_version: 0, completion_tokens: 1, tool_calls: 0, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
        });
      },
    });
    const res = await rolloutChunk({ manifest: ref, start: 0, end: 8 });
    return { peak, ran: res.ran };
  }

  test('at most max_concurrent_rollouts (4 of a chunk of 8), and every rollout still runs', async () => {
    expect(await peakInFlight({ maxConcurrentRollouts: 4 })).toEqual({ peak: 4, ran: 8 });
  });

  test('a cap of 1 runs the chunk one rollout after another', async () => {
    expect(await peakInFlight({ maxConcurrentRollouts: 1 })).toEqual({ peak: 1, ran: 8 });
  });

  test('a manifest from before the cap (none named) runs the whole chunk at once, as it did', async () => {
    expect(await peakInFlight({})).toEqual({ peak: 8, ran: 8 });
  });

  test("the worker's slots still bound it when they are fewer", async () => {
    expect(await peakInFlight({ maxConcurrentRollouts: 6 }, new RolloutSlots(3))).toEqual({ peak: 3, ran: 8 });
  });
});
