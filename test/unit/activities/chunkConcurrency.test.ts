/**
 * A chunk honours the run's orchestrator.max_concurrent_rollouts (carried by the step manifest):
 * the step keeps at least one chunk in flight, so before the manifest carried it a setting below the
 * chunk's size was exceeded (the smoke config sets 4; its chunk of 8 ran all 8 at once, unlike the per-rollout path).
 * Real chunk activity and local store; the rollouts are fakes that record how many run at once.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { RolloutSlots } from '../../../src/rollouts/slots';
import { StepManifest, type StepManifestInput } from '../../../src/contracts/manifest';
import { RolloutSummary } from '../../../src/contracts/trajectory';

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

describe('rollouts at once inside one chunk', () => {
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
