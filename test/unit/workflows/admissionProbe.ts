/** A workflow for test/unit/rolloutAdmission.test.ts: schedules chunk activities at once on a rollout queue, as StepRollouts' window does. */
import { proxyActivities } from '@temporalio/workflow';
import type { ChunkActivities, RolloutChunkInput } from '../../../src/contracts/chunks';

export async function AdmissionProbe(input: { taskQueue: string; chunks: RolloutChunkInput[] }): Promise<number[]> {
  const { rolloutChunk } = proxyActivities<ChunkActivities>({ taskQueue: input.taskQueue, startToCloseTimeout: '1 minute', retry: { maximumAttempts: 1 } });
  return (await Promise.all(input.chunks.map((c) => rolloutChunk(c)))).map((r) => r.count);
}
