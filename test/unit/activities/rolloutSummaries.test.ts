/**
 * The filterGroups activity (difficulty filtering) over a real local store: every round's summaries joined,
 * the informative groups' kept, counts per round; and a refill round's tasks and keys never collide with the
 * step's first round's.
 */
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { createRolloutSummaryActivities, readRolloutSummaries } from '../../../src/activities/rolloutSummaries';
import { sampleForStep } from '../../../src/activities/dataset';
import type { RolloutSummary } from '../../../src/contracts/trajectory';

const s = (group: string, i: number, reward: number, stop: RolloutSummary['stop_reason'] = 'completed'): RolloutSummary => ({
  task_id: group, group_id: group, rollout_index: i, trajectory: { uri: `file:///${group}/${i}`, sha256: 'x', bytes: 1 },
  reward, components: {}, stop_reason: stop, policy_version: 0, completion_tokens: 1, tool_calls: 0, model_ms: 0, tools_ms: 0, sandbox_ms: 0,
});

describe('filterGroups', () => {
  test('joins the rounds, keeps exactly the informative groups, counts each round', async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(tmpdir(), 'ratchet-filter-')));
    const a = createRolloutSummaryActivities({ store });
    const r0 = await a.storeRolloutSummaries({ runId: 'r', step: 2, summaries: [s('a', 0, 1), s('a', 1, 0), s('b', 0, 0), s('b', 1, 0)] });
    const r1 = await a.storeRolloutSummaries({ runId: 'r', step: 2, round: 1, summaries: [s('c', 0, 0.5), s('c', 1, 0, 'max_turns')] });
    expect(r1.uri).not.toBe(r0.uri);
    const scored = await a.filterGroups({ runId: 'r', step: 2, rounds: [r0, r1] });
    expect(scored).toMatchObject({ informative: 2, rounds: [{ groups: 2, informative: 1 }, { groups: 1, informative: 1 }] });
    expect((await readRolloutSummaries(store, scored.kept)).map((x) => `${x.group_id}/${x.rollout_index}`)).toEqual(['a/0', 'a/1', 'c/0', 'c/1']);
    expect(await readRolloutSummaries(store, scored.all)).toHaveLength(6);
    // Masked limit-ended episodes leave c with one baseline member: no signal.
    const masked = await a.filterGroups({ runId: 'r', step: 2, rounds: [r0, r1], limitEnded: 'mask' });
    expect(masked).toMatchObject({ informative: 1, rounds: [{ groups: 2, informative: 1 }, { groups: 1, informative: 0 }] });
    expect((await readRolloutSummaries(store, masked.kept)).map((x) => x.group_id)).toEqual(['a', 'a']);
    // The first answer's artifacts are untouched by the second (content keys).
    expect(await readRolloutSummaries(store, scored.kept)).toHaveLength(4);
  });

  test('a refill round samples its own tasks with group ids of its own; round 0 is the epoch walk as before', () => {
    const ids = Array.from({ length: 50 }, (_, i) => `t${i}`);
    const base = { runId: 'r', step: 3, seed: 7, batchSize: 4, taskSetDir: '/x', envs: [{ id: 'swe-grep', dataset: 'd', weight: 1 }] };
    const first = sampleForStep(base, [ids], ['/x/d']);
    expect(sampleForStep({ ...base, round: 0 }, [ids], ['/x/d'])).toEqual(first);
    const r1 = sampleForStep({ ...base, round: 1 }, [ids], ['/x/d']);
    const r2 = sampleForStep({ ...base, round: 2 }, [ids], ['/x/d']);
    expect(r1.map((t) => t.groupId).every((g) => g.startsWith('s3-r1-g'))).toBe(true);
    const groups = [...first, ...r1, ...r2].map((t) => t.groupId);
    expect(new Set(groups).size).toBe(groups.length);
    expect(r1.map((t) => t.instanceId)).not.toEqual(r2.map((t) => t.instanceId));
    expect(sampleForStep({ ...base, round: 1 }, [ids], ['/x/d'])).toEqual(r1);
  });
});
