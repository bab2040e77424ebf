/**
 * A retried chunk adopts the rollouts an earlier attempt finished and stored but never named in
 * a heartbeat (heartbeats are throttled: a worker killed just after a rollout finished may have
 * sent none for it). Real chunk activity, real local store; the rollouts themselves are fakes
 * that count their runs.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { StepManifest, rolloutInputOf } from '../../../src/contracts/manifest';
import { RolloutSummary, Trajectory } from '../../../src/contracts/trajectory';
import { runKeys } from '../../../src/artifacts/keys';
import { saveTrajectory } from '../../../src/rollouts/record';
import type { RolloutInput } from '../../../src/contracts/rollout';

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

describe('a retried chunk and the rollouts an earlier attempt stored', () => {
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
