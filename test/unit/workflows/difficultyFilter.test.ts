/**
 * Online difficulty filtering ([orchestrator.difficulty_filter]; patch v0.8-difficulty-filter) on a real dev
 * server with fake activities: a step whose groups all score alike samples more tasks, round by round, until
 * it has batch_size informative groups, and stops at max_refill_rounds; the batch holds the informative groups
 * only, and the step record lists each round with the policy version that sampled it. And the pass-rate pool
 * that each step's rollouts feed and the next step samples from.
 */
import { describeWithStack } from '../../helpers/stack';
import type { TrainRun } from '../../../src/workflows/trainRun';
import { taskIdOf, type RolloutInput } from '../../../src/contracts';
import { makeFakes, type FakeOptions } from '../../helpers/workflowFakes';
import { inNamespace, useFakeWorld, withFakeWorkers } from '../../helpers/fakeWorld';

jest.setTimeout(150_000);

/** Tasks whose rollouts score 0 and 1 alternately (informative); every other task scores 0 on every rollout. */
const rewardFrom = (informative: Set<string>) => (input: RolloutInput): number =>
  (informative.has(taskIdOf(input.task)) ? input.rolloutIndex % 2 : 0);

describeWithStack('TrainRun difficulty filtering and pass-rate pools (fake activities, real dev server)', ['temporalBinary'], () => {
  // One server for the file's tests, which run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });
  let n = 0;

  async function run(opts: FakeOptions, input: { continueAsNewEvery?: number } = {}) {
    const f = makeFakes(opts);
    await inNamespace(world, (ns) => withFakeWorkers(world, f, { namespace: ns }, async (_f, { client }) => {
      const runId = `filter-${process.pid}-${++n}`;
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, ...input }],
      });
      await handle.result();
    }));
    return f;
  }

  /** The tasks each refill round rolled out, by round, from the rollouts' own inputs (group ids name the round). */
  const tasksByRound = (f: ReturnType<typeof makeFakes>, step: number): Map<number, Set<string>> => {
    const out = new Map<number, Set<string>>();
    for (const r of f.rolloutInputs.filter((x) => x.step === step)) {
      const round = Number(/-r(\d+)-/.exec(r.groupId)?.[1] ?? 0);
      out.set(round, (out.get(round) ?? new Set<string>()).add(taskIdOf(r.task)));
    }
    return out;
  };

  test.concurrent('refills to batch_size informative groups (chunks of 2), and trains on those only', async () => {
    // batch_size 4. Round 0: 1 of 4 informative, 3 missing. Round 1 (3 tasks): 1 more, 2 missing. Round 2 (2 tasks): both.
    const informative = new Set(['task-0-0', 'task-0-r1-2', 'task-0-r2-0', 'task-0-r2-1']);
    const f = await run({
      orchestrator: { batch_size: 4, rollouts_per_example: 2, max_steps: 1, rollouts_per_chunk: 2, difficulty_filter: { enabled: true, max_refill_rounds: 5 } },
      rewardOf: rewardFrom(informative),
    });
    const rounds = tasksByRound(f, 0);
    expect([...rounds.keys()]).toEqual([0, 1, 2]);
    expect([...rounds.values()].map((s) => s.size)).toEqual([4, 3, 2]);
    // The batch: exactly the informative tasks' rollouts, every one of them.
    const batch = f.summariesOf(f.batches[0]!);
    expect(new Set(batch.map((s) => s.task_id))).toEqual(informative);
    expect(batch).toHaveLength(informative.size * 2);
    const rec = f.records[0]!.record;
    expect(rec.refill).toEqual({
      target: 4,
      rounds: [
        { round: 0, groups: 4, informative_groups: 1, policy_version: 0 },
        { round: 1, groups: 3, informative_groups: 1, policy_version: 0 },
        { round: 2, groups: 2, informative_groups: 2, policy_version: 0 },
      ],
    });
    expect(rec).toMatchObject({ groups: 9, informative_groups: 4, sampling_policy_version: 0, rollouts: 18 });
  });

  test.concurrent('stops at max_refill_rounds when no round brings an informative group; the step then trains on nothing', async () => {
    const f = await run({
      orchestrator: { batch_size: 3, rollouts_per_example: 2, max_steps: 1, difficulty_filter: { enabled: true, max_refill_rounds: 2 } },
      rewardOf: () => 0.25,
    });
    const rounds = tasksByRound(f, 0);
    // Round 0 and exactly two refill rounds, each for the 3 groups still missing.
    expect([...rounds.keys()]).toEqual([0, 1, 2]);
    expect([...rounds.values()].map((s) => s.size)).toEqual([3, 3, 3]);
    // Nothing to build: the step is recorded as an empty batch that says why, and the run goes on.
    expect(f.batches).toEqual([]);
    expect(f.records[0]!.record.error).toMatchObject({ type: 'EmptyBatch', message: expect.stringMatching(/no group of its 3 round\(s\) had rewards that differ.*Fix:/) });
    expect(f.records[0]!.record.refill!.rounds.map((r) => [r.groups, r.informative_groups])).toEqual([[3, 0], [3, 0], [3, 0]]);
    expect(f.records[0]!.record).toMatchObject({ groups: 9, informative_groups: 0, rollouts: 18 });
  });

  test.concurrent('off (the default): one round a step, no filterGroups call, every group in the batch', async () => {
    const f = await run({ orchestrator: { batch_size: 2, rollouts_per_example: 2, max_steps: 2 }, rewardOf: () => 0 });
    expect(f.events.some((e) => e.what === 'filterGroups')).toBe(false);
    expect(f.batches.map((b) => f.summariesOf(b).length)).toEqual([4, 4]);
    expect(f.records.map((r) => [r.record.informative_groups, r.record.refill])).toEqual([[0, undefined], [0, undefined]]);
  });

  test.concurrent('pass-rate pools: each step counts its rollouts into the pool; the next step samples from it, across continue-as-new; the state keeps it', async () => {
    const f = await run({
      orchestrator: { batch_size: 2, rollouts_per_example: 2, max_steps: 3, pass_rate_pool: { enabled: true, pass_reward: 1 } },
      // Task g0 of each step passes on its odd rollouts; g1 never.
      rewardOf: (input) => (taskIdOf(input.task).endsWith('-0') ? input.rolloutIndex % 2 : 0),
    }, { continueAsNewEvery: 1 });
    const pools = f.records.map((r) => r.record.task_pool!);
    expect(pools.map((p) => [p.tasks, p.sometimes])).toEqual([[2, 1], [4, 2], [6, 3]]);
    // The pool after step s is what step s + 1 sampled with (step 0: none yet), and what the state file names.
    expect(f.sampleInputs.map((s) => s.taskPool?.uri)).toEqual([undefined, pools[0]!.pool.uri, pools[1]!.pool.uri]);
    expect(f.records.map((r) => r.state.taskPool?.uri)).toEqual(pools.map((p) => p.pool.uri));
    expect(f.pools.get(pools[2]!.pool.uri)!.tasks).toEqual({
      'task-0-0': { rollouts: 2, passes: 1 }, 'task-0-1': { rollouts: 2, passes: 0 },
      'task-1-0': { rollouts: 2, passes: 1 }, 'task-1-1': { rollouts: 2, passes: 0 },
      'task-2-0': { rollouts: 2, passes: 1 }, 'task-2-1': { rollouts: 2, passes: 0 },
    });
  });
});
