/**
 * A step's rollout summaries as ONE artifact: StepRollouts stores them here in
 * parts small enough for a Temporal payload, then joins the parts, and TrainRun
 * carries only the joined ref. Inline, the summaries crossed the 2 MB payload
 * limit near 2,600 rollouts per step.
 */
import { z } from 'zod';
import { runKeys } from '../artifacts/keys';
import { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, storeForRef, withStoreErrors } from '../artifacts/stores';
import { ArtifactsFields } from '../config/schema';
import { RolloutSummary } from '../contracts/trajectory';
import { rolloutStats } from '../rollouts/stats';
import { StoreRolloutSummariesInput, type RolloutStats, type RolloutStatsInput, type RolloutSummaryActivities } from '../contracts';

/** Summaries per stored part: ~0.8 KB each, so a part's activity input stays far below 2 MB. */
export const SUMMARIES_PER_PART = 1000;

export async function readRolloutSummaries(store: ArtifactStore, ref: ArtifactRef, settings?: z.infer<typeof ArtifactsFields>): Promise<RolloutSummary[]> {
  return z.array(RolloutSummary).parse(await storeForRef(ref, settings, store).getJson(ref));
}

export function createRolloutSummaryActivities({ store }: { store: ArtifactStore }) {
  return {
    async storeRolloutSummaries(raw: StoreRolloutSummariesInput): Promise<ArtifactRef> {
      const input = StoreRolloutSummariesInput.parse(raw);
      return withStoreErrors(async () => {
        const runStore = storeFor(input.artifacts, store);
        if (input.parts) {
          const all: RolloutSummary[] = [];
          for (const p of input.parts) all.push(...await readRolloutSummaries(store, p, input.artifacts));
          const key = input.shard === undefined ? runKeys.rolloutSummaries(input.runId, input.step) : runKeys.rolloutSummariesShard(input.runId, input.step, input.shard);
          return runStore.putJson(key, all);
        }
        return runStore.putJson(runKeys.rolloutSummaries(input.runId, input.step, input.part), input.summaries ?? []);
      });
    },

    /** The step's statistics for its record, computed beside the data instead of in the workflow. */
    async rolloutStatsOf(input: RolloutStatsInput): Promise<RolloutStats & { rollouts: number }> {
      return withStoreErrors(async () => {
        const all = await readRolloutSummaries(store, input.summaries, input.artifacts);
        return { ...rolloutStats(all, input.trainerPolicyVersion, input.limitEnded), rollouts: all.length };
      });
    },
  } satisfies RolloutSummaryActivities;
}
