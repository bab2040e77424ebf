/**
 * A step's rollout summaries as ONE artifact: StepRollouts stores them here in
 * parts small enough for a Temporal payload, then joins the parts, and TrainRun
 * carries only the joined ref. Inline, the summaries crossed the 2 MB payload
 * limit near 2,600 rollouts per step.
 */
import { createHash } from 'node:crypto';
import { z } from 'zod';
import { runKeys } from '../artifacts/keys';
import { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, storeForRef, withStoreErrors } from '../artifacts/stores';
import { ArtifactsFields } from '../config/schema';
import { RolloutSummary } from '../contracts/trajectory';
import { rolloutStats } from '../rollouts/stats';
import { groupSignal } from '../samples/groupSignal';
import { emptyPool, poolCounts, updatePool, type TaskPool } from '../samples/taskPool';
import {
  StoreRolloutSummariesInput, type FilterGroupsInput, type FilterGroupsResult, type RolloutStats, type RolloutStatsInput, type RolloutSummaryActivities,
  type UpdateTaskPoolInput,
} from '../contracts';

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
          const key = input.shard === undefined ? runKeys.rolloutSummaries(input.runId, input.step, undefined, input.round)
            : runKeys.rolloutSummariesShard(input.runId, input.step, input.shard, input.round);
          return runStore.putJson(key, all);
        }
        return runStore.putJson(runKeys.rolloutSummaries(input.runId, input.step, input.part, input.round), input.summaries ?? []);
      });
    },

    async updateTaskPool(input: UpdateTaskPoolInput): Promise<{ pool: ArtifactRef; tasks: number; sometimes: number }> {
      return withStoreErrors(async () => {
        const previous = input.previous;
        const prev = previous ? await storeForRef(previous, input.artifacts, store).getJson(previous) as TaskPool : emptyPool();
        const pool = updatePool(prev, input.step, await readRolloutSummaries(store, input.summaries, input.artifacts), input.passReward);
        const sha = createHash('sha256').update(JSON.stringify(pool)).digest('hex');
        const ref = await storeFor(input.artifacts, store).putJson(runKeys.taskPool(input.runId, input.step, sha), pool);
        return { pool: ref, ...poolCounts(pool) };
      });
    },

    async filterGroups(input: FilterGroupsInput): Promise<FilterGroupsResult> {
      return withStoreErrors(async () => {
        const runStore = storeFor(input.artifacts, store);
        const all: RolloutSummary[] = [];
        const rounds: FilterGroupsResult['rounds'] = [];
        const informative = new Set<string>();
        for (const ref of input.rounds) {
          const summaries = await readRolloutSummaries(store, ref, input.artifacts);
          const signal = groupSignal(summaries, input.limitEnded);
          rounds.push({ groups: signal.groups.length, informative: signal.informative.length });
          for (const g of signal.informative) informative.add(g);
          all.push(...summaries);
        }
        const kept = all.filter((s) => informative.has(s.group_id));
        const put = (which: 'all' | 'kept', xs: RolloutSummary[]) => {
          const text = JSON.stringify(xs);
          return runStore.putJson(runKeys.rolloutSummariesFiltered(input.runId, input.step, which, createHash('sha256').update(text).digest('hex')), xs);
        };
        return { all: await put('all', all), kept: await put('kept', kept), rounds, informative: informative.size };
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
