/** Workflows for test/unit/rolloutAdmission.test.ts: chunk activities scheduled at once on a rollout queue, as StepRollouts' window does; a chunk call that times out. */
import { proxyActivities } from '@temporalio/workflow';
import type { ChunkActivities, RolloutChunkInput } from '../../../src/contracts/chunks';
import { afterFailedCall } from '../../../src/workflows/rolloutShard';

export async function AdmissionProbe(input: { taskQueue: string; chunks: RolloutChunkInput[] }): Promise<number[]> {
  const { rolloutChunk } = proxyActivities<ChunkActivities>({ taskQueue: input.taskQueue, startToCloseTimeout: '1 minute', retry: { maximumAttempts: 1 } });
  return (await Promise.all(input.chunks.map((c) => rolloutChunk(c)))).map((r) => r.count);
}

/**
 * A chunk call that ends in a heartbeat timeout (its worker froze after naming finished rollouts), then
 * StepRollouts' rule for the next call (afterFailedCall): returns the next call's `done` indices.
 */
export async function TimeoutProbe(input: { taskQueue: string; chunk: RolloutChunkInput; keep: boolean }): Promise<number[] | null> {
  const { rolloutChunk } = proxyActivities<ChunkActivities>({ taskQueue: input.taskQueue, startToCloseTimeout: '1 minute', heartbeatTimeout: '2 seconds', retry: { maximumAttempts: 1 } });
  try {
    await rolloutChunk(input.chunk);
    return null;
  } catch (err) {
    const next = afterFailedCall(input.chunk, err, () => input.keep);
    return next.done ? next.done.map((d) => d.i) : null;
  }
}
