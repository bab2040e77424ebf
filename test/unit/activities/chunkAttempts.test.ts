/**
 * Issue 39, item 5: a rollout's infrastructure failures count against its own tries, not its
 * chunk's attempt number. A rollout first run on the chunk's 3rd attempt (its chunk-mates failed
 * twice, or it waited behind them) has had no try before and is retried, not dropped, at its first
 * infrastructure failure. Real chunk activity and local store, under Temporal's mock activity context.
 */
import { mkdtempSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { MockActivityEnvironment } from '@temporalio/testing';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { runKeys } from '../../../src/artifacts/keys';
import { createChunkActivity } from '../../../src/activities/rolloutChunk';
import { StepManifest } from '../../../src/contracts/manifest';
import type { ChunkProgress } from '../../../src/contracts/chunks';
import { RolloutSummary } from '../../../src/contracts/trajectory';
import { INFRA_ATTEMPTS, retryInfrastructureFailure } from '../../../src/rollouts/errors';

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

describe("a rollout's tries in a chunk", () => {
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
