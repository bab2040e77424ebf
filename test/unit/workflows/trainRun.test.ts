/**
 * TrainRun against a real Temporal dev server (the PyPI CLI, never downloaded)
 * with fake activities: the loop, async overlap, control updates, progress,
 * continue-as-new, a dead trainer and a down inference server.
 * Set RATCHET_RECORD_HISTORIES=1 to record histories into test/fixtures/histories/<release>/ for the replay test.
 *
 * The "TrainRun cost ledger and budgets (fake activities, real dev server)" block:
 * The cost ledger and budgets (issue 30; docs/operations.md, "What a run costs and budgets") on a real
 * dev server with fake activities: each step record's cost adds up its rollouts' sandboxes and tokens
 * and the trainer's seconds, run_cost is the running sum (also across continue-as-new), a run whose
 * cost reaches a budget waits with status budget-exhausted, `set --budget` with a bad value is refused,
 * and raising the budget lets the run go on.
 *
 * The "TrainRun difficulty filtering and pass-rate pools (fake activities, real dev server)" block:
 * Online difficulty filtering ([orchestrator.difficulty_filter]; patch v0.8-difficulty-filter) on a real dev
 * server with fake activities: a step whose groups all score alike samples more tasks, round by round, until
 * it has batch_size informative groups, and stops at max_refill_rounds; the batch holds the informative groups
 * only, and the step record lists each round with the policy version that sampled it. And the pass-rate pool
 * that each step's rollouts feed and the next step samples from.
 *
 * The "TrainRun, trainer.mode = "full" (fake activities, real dev server)" block:
 * trainer.mode = "full" in TrainRun (fake activities, real dev server; issue 41): every weight sync is a
 * full one, naming the checkpoint of the version it serves (the base model at version 0, synced before
 * the first rollout); the rollouts ask for the served model at every version, never an adapter name;
 * the steps record no adapter. A LoRA run's syncs and model names are as before (no `full`).
 *
 * The "init_from (fake activities, real dev server)" block:
 * [model] init_from in the workflows (fake activities, real dev server): the resolved origin reaches
 * trainer.load as `init` wherever the run has no checkpoint of its own (its first load, and after a
 * fallback to "the base model"), never beside a checkpoint; version 0 is the origin's adapter, served
 * as <run>/policy-v0 before the first rollout and kept while rollouts may use it; each step's
 * lineage names the origin. SftRun takes it the same way.
 * Set RATCHET_RECORD_HISTORIES=1 to record histories for the replay test.
 */
import type { WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { SA, pauseUpdate, progressQuery, resumeUpdate, stopAfterCurrentStepUpdate, controlUpdates, setSettingsUpdate } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import type { ReleaseRunInput, ReleaseRunResult, TrainRunInput } from '../../../src/contracts';
import { inNamespace, makeFakes, useFakeWorld, withFakeWorkers, type FakeOptions, type TestNamespace } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';
import { TRAINING_PRIORITY } from '../../../src/shared/fairness';
import { WorkflowUpdateFailedError, type Client } from '@temporalio/client';
import { taskIdOf, type RolloutInput } from '../../../src/contracts';
import { adapterName } from '../../../src/shared/adapters';
import { FAKE_INIT } from '../../helpers/workflowFakes';

jest.setTimeout(150_000); // the longest limit of the blocks merged here

/**
 * One dev server for the whole file (the Temporal SDK's runtime is installed once a file, so a file has one fake
 * world), with a namespace for each of its 43 concurrent tests: every test gets one that no test used before (a
 * namespace goes back to the pool after its test, and the pool hands out unused ones first). The budget test runs
 * in the default namespace, which no other test uses.
 */
const world = useFakeWorld({ concurrent: 43 });

describeWithStack('TrainRun workflow (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait on timers and the server, so they run at once (test.concurrent), each in a namespace of its own.

  /** A test's namespace: its client, and start() for a TrainRun there. */
  interface Run {
    client: Client;
    start: (input?: Partial<TrainRunInput>) => Promise<WorkflowHandleWithFirstExecutionRunId<typeof TrainRun>>;
  }

  let n = 0;
  const runIn = (ns: TestNamespace): Run => ({
    client: ns.client,
    start: (input = {}) => {
      const runId = `run-${process.pid}-${++n}`;
      return ns.client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, ...input }],
      });
    },
  });

  /** Runs the fake stack (main, rollout, trainer-announce, seven trainers and any inference host queues) in a namespace of its own around fn. */
  const withWorkers = <T>(opts: FakeOptions, fn: (fakes: ReturnType<typeof makeFakes>, run: Run) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, makeFakes(opts), {
      trainers: ['w1', 'w2', 'w3', 'w4', 'w5', 'w6', 'w7'], hostQueues: Object.keys(opts.hostQueues ?? {}), namespace: ns,
    }, (fakes) => fn(fakes, runIn(ns))));

  const record = (handle: WorkflowHandle, name: string): Promise<void> => recordHistory(handle, name);

  // The longest tests (inference waits of 5 s and more, in real time) first: concurrent tests start in file order, five at a time.
  test.concurrent('an outage at the last step waits on in the same run: nothing after it would serve the version', async () => {
    await withWorkers({ inferenceDownTimes: 3, orchestrator: { max_steps: 1 } }, async (f, t) => {
      // capS 1: the child's pauses after its first (5 s, fixed) are 1 s instead of 10, 20...; the tries are the same.
      const handle = await t.start({ inferenceWaitsPerExecution: 2, outageWaits: { capS: 1 } });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 1, policyVersion: 1 });
      expect((await handle.describe()).runId).toBe(handle.firstExecutionRunId);
      expect(f.records[0]!.record.weight_sync).toMatchObject({ policyVersion: 1 });
      // 2 tries in the run, 2 in the child (down, then served), 1 more in the run for the step record.
      expect(f.syncs).toHaveLength(5);
      // Issue 39: past the execution's tries the wait is an InferenceWait child (it continues as new), so a
      // last step's outage of days does not grow the run's history; the run itself made its 2 tries and 1 after.
      const events = (await handle.fetchHistory()).events ?? [];
      const children = events.map((e) => e.startChildWorkflowExecutionInitiatedEventAttributes?.workflowType?.name).filter((n) => n === 'InferenceWait');
      expect(children).toHaveLength(1);
      expect(events.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'syncWeights')).toHaveLength(3);
    });
  });

  test.concurrent('a long inference outage continues as new instead of growing one history; nothing is trained twice', async () => {
    await withWorkers({ inferenceDownTimes: 5, orchestrator: { max_steps: 2 } }, async (f, t) => {
      const handle = await t.start({ inferenceWaitsPerExecution: 2, continueAsNewEvery: 100 });
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 2, policyVersion: 2 });
      expect((await handle.describe()).runId).not.toBe(handle.firstExecutionRunId);
      expect([...f.applied.values()]).toEqual([1, 1]);
      // Step 0 was recorded trained-but-not-served; the next execution served version 1 before rolling out.
      expect(f.records[0]!.record).toMatchObject({ step: 0, policy_version: 1 });
      expect(f.records[0]!.record.weight_sync).toBeUndefined();
      // 2 failed attempts in each of the first two executions, then served in the third, then step 1's.
      expect(f.syncs.map((x) => x.policyVersion)).toEqual([1, 1, 1, 1, 1, 1, 2]);
      await record(t.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId), 'trainrun-inference-wait-continue-as-new-1');
      await record(handle, 'trainrun-inference-wait-continue-as-new-3');
    });
  });

  test.concurrent('runs every step: exact rollout counts, one optimizer step each, versions advance, records written', async () => {
    await withWorkers({}, async (f, t) => {
      const handle = await t.start();
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed', configSha256: f.records[0]!.state.configRef.sha256 });
      expect(f.batches.map((b) => f.summariesOf(b).length)).toEqual([6, 6, 6]);
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      expect(f.records.map((r) => [r.record.step, r.record.policy_version, r.state.nextStep])).toEqual([[0, 1, 1], [1, 2, 2], [2, 3, 3]]);
      // async_level 0: each step's rollouts use the version the trainer then trains from.
      expect(f.batches.map((b) => [b.trainerPolicyVersion, ...new Set(f.summariesOf(b).map((t) => t.policy_version))])).toEqual([[0, 0], [1, 1], [2, 2]]);
      expect(f.records[1]!.record.mean_reward).toBeCloseTo(0.2, 6);
      const desc = await handle.describe();
      expect(desc.typedSearchAttributes.get(SA.step)).toBe(3);
      expect(desc.typedSearchAttributes.get(SA.policyVersion)).toBe(3);
      expect(desc.typedSearchAttributes.get(SA.status)).toBe('completed');
      const p = await handle.query(progressQuery);
      expect(p).toMatchObject({ status: 'completed', step: 3, policyVersion: 3 });
      await record(handle, 'trainrun-sync');
      await record(t.client.workflow.getHandle(`${handle.workflowId}-step-1-rollouts`), 'steprollouts');
    });
  });

  test.concurrent('a run\'s rollouts, step children and trainer calls carry its priority and fairness keys (docs/architecture.md); its rolloutHeartbeat input reaches the chunks', async () => {
    await withWorkers({ orchestrator: { max_steps: 1, fairness_weight: 2 } }, async (_f, t) => {
      const handle = await t.start({ rolloutHeartbeat: '30 seconds' });
      await handle.result();
      const runId = handle.workflowId;
      const keyed = { priorityKey: TRAINING_PRIORITY, fairnessKey: runId, fairnessWeight: 2 };
      const parent = (await handle.fetchHistory()).events ?? [];
      const child = parent.find((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)!.startChildWorkflowExecutionInitiatedEventAttributes!;
      expect(child.priority).toMatchObject(keyed);
      const trainerCalls = parent.map((e) => e.activityTaskScheduledEventAttributes).filter((a) => a?.activityType?.name?.match(/^trainer\.(load|step|save)$/));
      expect(trainerCalls.map((a) => a!.activityType!.name)).toEqual(['trainer.load', 'trainer.step', 'trainer.save']);
      for (const a of trainerCalls) expect(a!.priority).toMatchObject(keyed);
      const steps = (await t.client.workflow.getHandle(`${runId}-step-0-rollouts`).fetchHistory()).events ?? [];
      // 2 tasks x 3 rollouts in chunks of 16: one chunk activity.
      const chunks = steps.map((e) => e.activityTaskScheduledEventAttributes).filter((a) => a?.activityType?.name === 'rolloutChunk');
      expect(chunks).toHaveLength(1);
      for (const a of chunks) expect(a!.priority).toMatchObject(keyed);
      // TrainRunInput.rolloutHeartbeat, through StepRollouts, is the chunk's heartbeat timeout; the trainer's keeps its default.
      for (const a of chunks) expect(Number(a!.heartbeatTimeout?.seconds)).toBe(30);
      for (const a of trainerCalls) expect(Number(a!.heartbeatTimeout?.seconds)).toBe(60);
    });
  });

  test.concurrent('a step with no trainable token is recorded as an error and skipped; the trainer never sees it', async () => {
    await withWorkers({ emptyBatchSteps: [1], orchestrator: { async_level: 1 } }, async (f, t) => {
      const handle = await t.start();
      const result = await handle.result();
      await record(handle, 'trainrun-empty-batch');
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 2, stopped: 'completed' });
      expect([...f.applied.keys()].map((k) => k.split('/')[1])).toEqual(['0', '2']);
      const skipped = f.records.find((r) => r.record.step === 1)!.record;
      expect(skipped).toMatchObject({ samples: 0, policy_version: 1, trainer: { skipped: true }, error: { type: 'EmptyBatch' } });
      expect(skipped.error!.message).toMatch(/no sample has a trainable token/);
      expect(skipped.rollouts).toBe(6);
      expect(f.records.map((r) => [r.record.step, r.state.nextStep, r.state.policyVersion])).toEqual([[0, 1, 1], [1, 2, 1], [2, 3, 2]]);
    });
  });

  test.concurrent('async_level 1: next step\'s rollouts run while the trainer trains, staleness 1', async () => {
    await withWorkers({ orchestrator: { async_level: 1 }, trainMs: 600, rolloutMs: 20 }, async (f, t) => {
      const handle = await t.start();
      await handle.result();
      for (const s of [0, 1]) {
        const trainEnd = f.events.find((e) => e.what === 'train-end' && e.step === s)!.t;
        const nextRollout = f.events.find((e) => e.what === 'rollout-start' && e.step === s + 1)!.t;
        expect(nextRollout).toBeLessThan(trainEnd);
      }
      expect(f.batches.map((b) => [b.trainerPolicyVersion, ...new Set(f.summariesOf(b).map((t) => t.policy_version))])).toEqual([[0, 0], [1, 0], [2, 1]]);
      expect(f.records.map((r) => r.record.mean_staleness)).toEqual([0, 1, 1]);
      expect(f.batches.map((b) => f.summariesOf(b).length)).toEqual([6, 6, 6]);
      await record(handle, 'trainrun-async');
    });
  });

  test.concurrent('the trainer is announced and loaded while the first step\'s rollouts run, and not shown as waited for', async () => {
    await withWorkers({ orchestrator: { max_steps: 1 }, rolloutMs: 300 }, async (f, t) => {
      const handle = await t.start();
      const statuses = new Set<string>();
      const result = handle.result();
      while (!f.events.some((e) => e.what === 'summaries-stored')) {
        statuses.add((await handle.query(progressQuery)).status);
        await sleep(50);
      }
      await result;
      const at = (what: string) => f.events.findIndex((e) => e.what === what);
      expect(at('announce')).toBeGreaterThan(-1);
      expect(at('announce')).toBeLessThan(at('summaries-stored'));
      expect(f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null])).toEqual([['w1', null]]);
      expect([...statuses]).not.toContain('waiting-for-trainer');
    });
  });

  test.concurrent('continue-as-new every step carries only small state and finishes the run', async () => {
    await withWorkers({ orchestrator: { async_level: 1 } }, async (f, t) => {
      const handle = await t.start({ continueAsNewEvery: 1 });
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      // Three executions in the chain; the later ones read the stored config, not the TOML.
      expect(f.events.filter((e) => e.what === 'openRun')).toHaveLength(1);
      expect((await handle.describe()).runId).not.toBe(handle.firstExecutionRunId);
      await record(handle, 'trainrun-continue-as-new');
    });
  });

  test.concurrent('pause, resume and stopAfterCurrentStep, with validators and the progress query', async () => {
    await withWorkers({ orchestrator: { max_steps: 5 }, trainMs: 300 }, async (f, t) => {
      const handle = await t.start();
      await expect(updateError(handle.executeUpdate(resumeUpdate))).resolves.toMatch(/not paused/);
      expect(await handle.executeUpdate(pauseUpdate)).toBe('paused');
      await expect(updateError(handle.executeUpdate(pauseUpdate))).resolves.toMatch(/already paused/);
      await waitFor(async () => (await handle.query(progressQuery)).phase === 'idle');
      const paused = await handle.query(progressQuery);
      const stepsAtPause = f.records.length;
      await sleep(700);
      expect(f.records.length).toBe(stepsAtPause);
      await record(handle, 'trainrun-paused');
      expect(paused.status).toBe('paused');
      expect((await handle.describe()).typedSearchAttributes.get(SA.status)).toBe('paused');
      expect(await handle.executeUpdate(resumeUpdate)).toBe('running');
      await waitFor(async () => f.records.length > stepsAtPause);
      expect(await handle.executeUpdate(stopAfterCurrentStepUpdate)).toBe('stopping');
      const result = await handle.result();
      expect(result.stopped).toBe('stopped-by-request');
      expect(result.stepsCompleted).toBeLessThan(5);
      expect(f.records).toHaveLength(result.stepsCompleted);
      await expect(handle.executeUpdate(pauseUpdate)).rejects.toThrow();
      await record(handle, 'trainrun-pause-resume-stop');
    });
  });

  test.concurrent('a dead trainer is replaced: re-announce, load the last checkpoint, the step applied once', async () => {
    await withWorkers({ deadTrainers: ['w1'], deadFromStep: 1 }, async (f, t) => {
      // w1 trains step 0; the run continues as new and keeps w1 (its lease), which dies in step 1; w2 takes over.
      const handle = await t.start({ trainerTimeouts: { heartbeat: '1 second', scheduleToStart: '2 seconds' }, continueAsNewEvery: 1 });
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      expect(f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null])).toEqual([
        ['w1', null], ['w1', 'file:///fake/ckpt-step-0'], ['w2', 'file:///fake/ckpt-step-0'], ['w2', 'file:///fake/ckpt-step-1'],
      ]);
      expect(f.announces()).toBe(2);
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      expect(f.records[1]!.record.trainer).toMatchObject({ restarts: 1 });
      await record(t.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId), 'trainrun-trainer-kept-then-replaced-1');
      await record(handle, 'trainrun-trainer-kept-then-replaced-3');
    });
  });

  test.concurrent('a corrupt newest checkpoint at trainer reload: the run falls back to the newest that verifies, retrains the later steps once each, on record', async () => {
    await withWorkers({ deadTrainers: ['w1'], deadFromStep: 2, corruptCheckpoints: [1] }, async (f, t) => {
      // w1 trains steps 0 and 1, then dies in step 2; w2 must load step 1's checkpoint, which is corrupt.
      const handle = await t.start({ trainerTimeouts: { heartbeat: '1 second', scheduleToStart: '2 seconds' } });
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      expect(f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null])).toEqual([
        ['w1', null], ['w2', 'file:///fake/ckpt-step-1'], ['w2', 'file:///fake/ckpt-step-0'],
      ]);
      // The fallback is on record: which checkpoint was bad, which one was used, which steps are retrained.
      expect(f.fallbacks).toHaveLength(1);
      expect(f.fallbacks[0]!.result).toMatchObject({
        fellBack: true,
        record: { bad: { step: 1, checkpoint: { uri: 'file:///fake/ckpt-step-1' } }, used: { step: 0, checkpoint: { uri: 'file:///fake/ckpt-step-0' } }, retrained_steps: [1], epoch: 1 },
        state: { nextStep: 1, policyVersion: 1, epoch: 1 },
      });
      // After the fallback, steps 1 and 2 are trained once each, on the checkpoint that verified.
      const at = f.events.findIndex((e) => e.what === 'fallback');
      expect(f.events.slice(at).filter((e) => e.what === 'train-end').map((e) => [e.step, e.worker])).toEqual([[1, 'w2'], [2, 'w2']]);
      // Step 1 has two records: the voided one (epoch 0) and the winner (epoch 1); later records carry the epoch.
      expect(f.records.map((r) => [r.record.step, r.record.epoch ?? 0, r.state.epoch ?? 0])).toEqual([[0, 0, 0], [1, 0, 0], [1, 1, 1], [2, 1, 1]]);
      // The retrained steps sample afresh: their task sampling carries the epoch (group ids, so keys, of their own).
      expect(f.sampleInputs.map((i) => [i.step, i.epoch ?? 0])).toEqual([[0, 0], [1, 0], [2, 0], [1, 1], [2, 1]]);
      const { winningSteps } = await import('../../../src/records/winners');
      const fb = f.fallbacks[0]!.result;
      expect(winningSteps(f.records.map((r) => r.record), fb.fellBack ? [fb.record] : []).map((r) => [r.step, r.epoch ?? 0, r.policy_version])).toEqual([[0, 0, 1], [1, 1, 2], [2, 1, 3]]);
      await record(t.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId), 'trainrun-checkpoint-fallback-1');
      await record(handle, 'trainrun-checkpoint-fallback-2');
    });
  });

  test.concurrent('inference down at weight sync: the run waits (waiting-for-inference), then goes on', async () => {
    await withWorkers({ inferenceDownTimes: 1, orchestrator: { max_steps: 1 } }, async (f, t) => {
      const handle = await t.start();
      await waitForStatus(handle, 'waiting-for-inference');
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(1);
      expect(f.syncs.length).toBe(2);
      await record(handle, 'trainrun-inference-wait');
    });
  });

  describe('inference replicas are a pool (inference.sync_quorum)', () => {
    const two = ['http://r1/v1', 'http://r2/v1'];

    test.concurrent('one replica of two dead for good, quorum 1: every step goes on without waiting; the dead one is recorded behind', async () => {
      await withWorkers({ inference: { base_urls: two, sync_quorum: 1 }, deadReplicas: ['http://r2/v1'], orchestrator: { max_steps: 2 } }, async (f, t) => {
        const handle = await t.start();
        const result = await handle.result();
        expect(result.stepsCompleted).toBe(2);
        expect(f.syncs.every((s) => s.quorum === 1)).toBe(true);
        // Every step's version reached r1 only: the record names r2 as behind.
        expect(f.records.map((r) => r.record.weight_sync?.behind)).toEqual([['http://r2/v1'], ['http://r2/v1']]);
        expect(f.events.filter((e) => e.what === 'sync-quorum').length).toBe(f.syncs.length);
        // Never a wait: no sync failed.
        expect(f.syncs.length).toBe(2);
        // Each rollout names its preferred replica (spread) and every replica, so its worker can move it.
        expect(new Set(f.rolloutInputs.map((r) => r.inferenceBaseUrl))).toEqual(new Set(two));
        expect(f.rolloutInputs.every((r) => JSON.stringify(r.inferenceBaseUrls) === JSON.stringify(two))).toBe(true);
        await record(handle, 'trainrun-replica-quorum-reached');
      });
    });

    test.concurrent('inference hosts (sync_task_queues), one of three down: the default majority (2 of 3) is reached; the host is recorded behind', async () => {
      const hostQueues = { 'inf-a': 'up', 'inf-b': 'down', 'inf-c': 'up' } as const;
      await withWorkers({ inference: { sync_task_queues: Object.keys(hostQueues) }, hostQueues, orchestrator: { max_steps: 1 } }, async (f, t) => {
        const handle = await t.start();
        const result = await handle.result();
        expect(result.stepsCompleted).toBe(1);
        // Every host was asked (all awaited), none of them was told the quorum (a host syncs all its own replicas).
        expect(f.hostSyncs.map((s) => s.host).sort()).toEqual(['inf-a', 'inf-b', 'inf-c']);
        expect(f.hostSyncs.every((s) => s.input.quorum === undefined && s.input.baseUrls.length === 0)).toBe(true);
        expect(f.records[0]!.record.weight_sync?.behind).toEqual(['inf-b']);
        await record(handle, 'trainrun-replica-quorum-hosts');
      });
    });

    test.concurrent('quorum not reached (the default majority: 2 of 2): the run waits (waiting-for-inference) until the replica is back', async () => {
      await withWorkers({ inference: { base_urls: two }, deadReplicas: ['http://r2/v1'], deadReplicaSyncs: 1, orchestrator: { max_steps: 1 } }, async (f, t) => {
        const handle = await t.start();
        await waitForStatus(handle, 'waiting-for-inference');
        const result = await handle.result();
        expect(result.stepsCompleted).toBe(1);
        expect(f.syncs.map((s) => s.quorum)).toEqual([2, 2]);
        expect(f.records[0]!.record.weight_sync?.behind).toBeUndefined();
        await record(handle, 'trainrun-replica-quorum-not-reached');
      });
    });
  });

  test.concurrent('two runs, one trainer: the second waits (waiting-for-trainer) until the first releases it; both ledgers exact', async () => {
    await withWorkers({ leases: 1, trainMs: 100 }, async (f, t) => {
      const a = await t.start();
      await waitFor(async () => f.leased.get('w1') === a.workflowId);
      const b = await t.start();
      await waitForStatus(b, 'waiting-for-trainer');
      const [ra, rb] = await Promise.all([a.result(), b.result()]);
      expect([ra.stepsCompleted, rb.stepsCompleted]).toEqual([3, 3]);
      for (const run of [a.workflowId, b.workflowId]) {
        expect([...f.applied.entries()].filter(([k]) => k.startsWith(`${run}/`)).map(([k, n]) => [k.split('/')[1], n])).toEqual([['0', 1], ['1', 1], ['2', 1]]);
        expect(f.records.filter((r) => r.record.run_id === run).map((r) => r.record.policy_version)).toEqual([1, 2, 3]);
      }
      // a released w1 (only then could b have it); each run's adapters left inference at its end.
      expect(f.releases).toEqual([{ worker: 'w1', runId: a.workflowId }, { worker: 'w1', runId: b.workflowId }]);
      expect(f.unloads).toEqual([a.workflowId, b.workflowId]);
      expect(f.leased.size).toBe(0);
      await record(b, 'trainrun-waited-for-trainer');
    });
  });

  test.concurrent('a terminated run\'s trainer goes to the next run at once, which unloads the ended run\'s adapters', async () => {
    const endedRuns = new Set<string>();
    await withWorkers({ leases: 1, trainMs: 2_000, endedRuns }, async (f, t) => {
      const a = await t.start();
      await waitFor(async () => f.leased.get('w1') === a.workflowId);
      await a.terminate('test: terminated mid-run, so it never releases its trainer');
      endedRuns.add(a.workflowId);
      const b = await t.start();
      expect((await b.result()).stepsCompleted).toBe(3);
      // a never released w1; b took it, unloaded a's adapters first, and its own at its end.
      expect(f.releases).toEqual([{ worker: 'w1', runId: b.workflowId }]);
      expect(f.unloads).toEqual([a.workflowId, b.workflowId]);
      await record(b, 'trainrun-took-trainer-from-ended-run');
    });
  });

  test.concurrent('ReleaseRun (ratchet release) gives back a terminated run\'s trainer and unloads its adapters; a second release finds it no longer held', async () => {
    await withWorkers({ leases: 1, trainMs: 2_000 }, async (f, t) => {
      const a = await t.start();
      await waitFor(async () => f.leased.get('w1') === a.workflowId);
      await a.terminate('test: terminated, so it never releases its trainer');
      const input: ReleaseRunInput = { runId: a.workflowId, trainerQueue: 'trainer-w1', baseUrls: ['http://r1/v1'], identity: 'me@host', reason: 'test' };
      const released = await t.client.workflow.execute('ReleaseRun', { taskQueue: 'ratchet', workflowId: `${a.workflowId}-release-1`, args: [input] }) as ReleaseRunResult;
      expect(released).toMatchObject({ runId: a.workflowId, trainer: { state: 'released', worker_id: 'w1' } });
      expect(f.leased.size).toBe(0);
      expect(f.unloads).toEqual([a.workflowId]);
      // Again: the trainer no longer holds the run.
      const again = await t.client.workflow.execute('ReleaseRun', { taskQueue: 'ratchet', workflowId: `${a.workflowId}-release-2`, args: [input] }) as ReleaseRunResult;
      expect(again.trainer.state).toBe('not-held');
    });
  });

  test.concurrent('a failed run still releases its trainer and unloads its adapters', async () => {
    await withWorkers({ leases: 1, stepFaults: { 1: 'BatchError' } }, async (f, t) => {
      const handle = await t.start();
      await expect(handle.result()).rejects.toThrow();
      expect(f.releases).toEqual([{ worker: 'w1', runId: handle.workflowId }]);
      expect(f.unloads).toEqual([handle.workflowId]);
      await record(handle, 'trainrun-failed-released');
    });
  });

  test.concurrent('a run failed on purpose, restarted under its id, goes on from its last completed step: no double step', async () => {
    await withWorkers({ stepFaults: { 1: 'BatchError' } }, async (f, t) => {
      const first = await t.start();
      await expect(first.result()).rejects.toThrow();
      expect(f.records.map((r) => r.record.step)).toEqual([0]);
      // What `ratchet restart` does: the same workflow id again; openRun finds the state file.
      const again = await t.client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: first.workflowId, args: [{ configPath: 'configs/fake.toml', runId: first.workflowId }],
      });
      expect(await again.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      expect([...f.applied.entries()]).toEqual([[`${first.workflowId}/0`, 1], [`${first.workflowId}/1`, 1], [`${first.workflowId}/2`, 1]]);
      expect(f.records.map((r) => r.record.step)).toEqual([0, 1, 2]);
      expect(f.loads.map((l) => l.checkpoint?.uri ?? null)).toEqual([null, 'file:///fake/ckpt-step-0']);
      await record(again, 'trainrun-restarted');
    });
  });

  test.concurrent('a batch the trainer ranks could not plan alike (StepPartition) is recorded on the step and skipped', async () => {
    await withWorkers({ stepFaults: { 1: 'StepPartition' }, orchestrator: { max_steps: 3 } }, async (f, t) => {
      const handle = await t.start();
      const result = await handle.result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 2, stopped: 'completed' });
      expect(f.records.map((r) => [r.record.step, r.record.error?.type ?? null, r.record.trainer.skipped ?? false]))
        .toEqual([[0, null, false], [1, 'StepPartition', true], [2, null, false]]);
    });
  });

  test.concurrent('a non-finite gradient or an OOM that survived its retry is recorded on the step and skipped', async () => {
    await withWorkers({ stepFaults: { 1: 'NonFiniteGradient', 2: 'StepOutOfMemory' }, orchestrator: { max_steps: 4 } }, async (f, t) => {
      const handle = await t.start();
      const result = await handle.result();
      await record(handle, 'trainrun-step-faults');
      expect(result).toMatchObject({ stepsCompleted: 4, policyVersion: 2, stopped: 'completed' });
      expect(f.records.map((r) => [r.record.step, r.record.policy_version, r.record.error?.type ?? null, r.record.trainer.skipped ?? false]))
        .toEqual([[0, 1, null, false], [1, 1, 'NonFiniteGradient', true], [2, 1, 'StepOutOfMemory', true], [3, 2, null, false]]);
      expect(f.records[1]!.record.error!.message).toMatch(/nothing applied/);
      // No weight sync for a skipped step: versions 1 and 2 only.
      expect(f.syncs.map((s) => s.policyVersion)).toEqual([1, 2]);
    });
  });

  test.concurrent('two trainers lost in one trainer.step (a partition, a reboot) are infrastructure: the step trains on a third, no TrainerKilled', async () => {
    await withWorkers({ killingSteps: [1], killingTimes: 2, orchestrator: { max_steps: 3 } }, async (f, t) => {
      const handle = await t.start({ trainerTimeouts: { heartbeat: '1 second', scheduleToStart: '2 seconds' } });
      const result = await handle.result();
      await record(handle, 'trainrun-trainer-lost-twice');
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      expect(f.events.filter((e) => e.what === 'trainer-killed').map((e) => [e.step, e.worker])).toEqual([[1, 'w1'], [1, 'w2']]);
      expect(f.records.map((r) => [r.record.step, r.record.policy_version, r.record.error?.type ?? null, r.record.trainer.skipped ?? false]))
        .toEqual([[0, 1, null, false], [1, 2, null, false], [2, 3, null, false]]);
      // w2 and w3 each load step 0's checkpoint; step 1 is applied once, on w3.
      expect(f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null])).toEqual([
        ['w1', null], ['w2', 'file:///fake/ckpt-step-0'], ['w3', 'file:///fake/ckpt-step-0'],
      ]);
      expect([...f.applied.entries()].map(([k, n]) => [k.split('/')[1], n])).toEqual([['0', 1], ['1', 1], ['2', 1]]);
    });
  });

  test.concurrent('a process fault (TrainerFault) is retried on a replacement trainer; the step trains there once', async () => {
    await withWorkers({ processFaults: { 1: ['RuntimeError'] }, orchestrator: { max_steps: 3 } }, async (f, t) => {
      const result = await (await t.start()).result();
      expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      expect(f.events.filter((e) => e.what === 'trainer-fault').map((e) => [e.step, e.worker])).toEqual([[1, 'w1']]);
      expect(f.records.map((r) => r.record.error?.type ?? null)).toEqual([null, null, null]);
      expect(f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null])).toEqual([['w1', null], ['w2', 'file:///fake/ckpt-step-0']]);
      expect([...f.applied.entries()].map(([k, n]) => [k.split('/')[1], n])).toEqual([['0', 1], ['1', 1], ['2', 1]]);
    });
  });

  test.concurrent('a batch that fails with the same error class on two trainer processes is a PoisonBatch, skipped; two different classes are not', async () => {
    await withWorkers({ processFaults: { 1: ['torch.OutOfMemoryError', 'RuntimeError', 'RuntimeError'], 2: ['RuntimeError', 'torch.AcceleratorError'] },
      orchestrator: { max_steps: 4 } }, async (f, t) => {
      const handle = await t.start();
      const result = await handle.result();
      await record(handle, 'trainrun-poison-batch');
      expect(result).toMatchObject({ stepsCompleted: 4, policyVersion: 3, stopped: 'completed' });
      // Step 1: OOM on w1, RuntimeError on w2, RuntimeError on w3: poison at the second RuntimeError (two processes).
      // Step 2: two different classes on w4 and w5, then it trains on w6.
      expect(f.events.filter((e) => e.what === 'trainer-fault').map((e) => [e.step, e.worker]))
        .toEqual([[1, 'w1'], [1, 'w2'], [1, 'w3'], [2, 'w4'], [2, 'w5']]);
      expect(f.records.map((r) => [r.record.step, r.record.policy_version, r.record.error?.type ?? null, r.record.trainer.skipped ?? false]))
        .toEqual([[0, 1, null, false], [1, 1, 'PoisonBatch', true], [2, 2, null, false], [3, 3, null, false]]);
      expect(f.records[1]!.record.error!.message).toMatch(/RuntimeError on two trainer processes \(w2, w3\)/);
      expect([...f.applied.entries()].map(([k, n]) => [k.split('/')[1], n])).toEqual([['0', 1], ['2', 1], ['3', 1]]);
    });
  });

  test.concurrent('a pause survives continue-as-new, and resume goes on from there', async () => {
    await withWorkers({ orchestrator: { max_steps: 3 }, trainMs: 500 }, async (f, t) => {
      const handle = await t.start({ continueAsNewEvery: 1 });
      await waitFor(async () => f.events.some((e) => e.what === 'train-start'));
      expect(await handle.executeUpdate(pauseUpdate)).toBe('paused');
      // Step 0 finishes, the run continues as new, and the new execution is still paused.
      await waitFor(async () => (await handle.describe()).runId !== handle.firstExecutionRunId);
      await waitFor(async () => (await handle.query(progressQuery)).phase === 'idle');
      await sleep(700);
      expect(await handle.query(progressQuery)).toMatchObject({ status: 'paused', step: 1 });
      expect(f.records).toHaveLength(1);
      expect((await handle.describe()).typedSearchAttributes.get(SA.status)).toBe('paused');
      expect(await handle.executeUpdate(resumeUpdate)).toBe('running');
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      await record(t.client.workflow.getHandle(handle.workflowId, handle.firstExecutionRunId), 'trainrun-pause-before-continue-as-new');
      await record(handle, 'trainrun-pause-after-continue-as-new');
    });
  });

  test.concurrent('artifact store down mid-run: the run waits (waiting-for-store), then records the step once and goes on', async () => {
    await withWorkers({ storeDownTimes: 2, orchestrator: { max_steps: 2 } }, async (f, t) => {
      const handle = await t.start();
      await waitForStatus(handle, 'waiting-for-store');
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(2);
      expect(f.records.map((r) => r.record.step)).toEqual([0, 1]);
      expect(f.events.filter((e) => e.what === 'store-down').length).toBe(2);
      expect([...f.applied.values()]).toEqual([1, 1]);
    });
  });

  test.concurrent('trainer.save finds its disk full: the run waits (waiting-for-disk), then saves, with no double step', async () => {
    await withWorkers({ diskFullTimes: 2, orchestrator: { max_steps: 2 } }, async (f, t) => {
      const handle = await t.start();
      await waitForStatus(handle, 'waiting-for-disk');
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(2);
      expect(f.events.filter((e) => e.what === 'disk-full').map((e) => e.step)).toEqual([0, 0]);
      // Each step trained once, recorded once: only the save was called again.
      expect([...f.applied.values()]).toEqual([1, 1]);
      expect(f.records.map((r) => r.record.step)).toEqual([0, 1]);
      expect((await handle.query(progressQuery)).status).toBe('completed');
      await record(handle, 'trainrun-disk-wait');
    });
  });

  test.concurrent('a rollout finds its disk full: the run waits (waiting-for-disk), then the step completes with every rollout', async () => {
    await withWorkers({ rolloutDiskFullTimes: 2, orchestrator: { max_steps: 1 } }, async (f, t) => {
      const handle = await t.start();
      await waitFor(async () => (await handle.query(progressQuery)).status === 'waiting-for-disk');
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(1);
      expect(f.events.filter((e) => e.what === 'rollout-disk-full').length).toBe(2);
      expect(f.records.map((r) => r.record.rollouts)).toEqual([6]);
      expect([...f.applied.values()]).toEqual([1]);
      expect((await handle.query(progressQuery)).status).toBe('completed');
    });
  });

  // Short limits stand in for days: 2 tries in the run, then an OutageWait child that continues as new every 2 tries.
  const shortOutage = { handoffAfter: 2, perExecution: 2, capS: 1 };

  /** The OutageWait children a workflow started, and how many executions each child's chain has. */
  async function outageChildren(client: Client, handle: WorkflowHandle): Promise<{ id: string; executions: number }[]> {
    const history = await handle.fetchHistory();
    const ids = (history.events ?? [])
      .map((e) => e.startChildWorkflowExecutionInitiatedEventAttributes)
      .filter((a) => a?.workflowType?.name === 'OutageWait')
      .map((a) => a!.workflowId!);
    return Promise.all(ids.map(async (id) => {
      const executions: string[] = [];
      for await (const w of client.workflow.list({ query: `WorkflowId = '${id}'` })) executions.push(w.runId);
      return { id, executions: executions.length };
    }));
  }

  test.concurrent('a long store outage: the wait moves to an OutageWait child that continues as new; the step is recorded once', async () => {
    await withWorkers({ storeDownTimes: 6, orchestrator: { max_steps: 2 } }, async (f, t) => {
      const handle = await t.start({ outageWaits: shortOutage });
      await waitForStatus(handle, 'waiting-for-store');
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(2);
      expect(f.events.filter((e) => e.what === 'store-down').length).toBe(6);
      expect(f.records.map((r) => r.record.step)).toEqual([0, 1]);
      expect([...f.applied.values()]).toEqual([1, 1]);
      // 2 tries in the run, then 4 failed + 1 good in the child: 2 tries per execution, so 3 executions.
      let children: { id: string; executions: number }[] = [];
      await waitFor(async () => (children = await outageChildren(t.client, handle)).every((c) => c.executions === 3) && children.length === 1);
      const recordSteps = (await handle.fetchHistory()).events!.filter((e) => e.activityTaskScheduledEventAttributes?.activityType?.name === 'recordStep');
      // Step 0's two failed tries and step 1's call: the outage's other tries are in the child's histories.
      expect(recordSteps.length).toBe(3);
      await record(handle, 'trainrun-store-outage-handoff');
    });
  });

  test.concurrent('a disk full for long at trainer.save: handed to OutageWait, saved once, no double step', async () => {
    await withWorkers({ diskFullTimes: 5, orchestrator: { max_steps: 2 } }, async (f, t) => {
      const handle = await t.start({ outageWaits: shortOutage });
      await waitForStatus(handle, 'waiting-for-disk');
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(2);
      expect(f.events.filter((e) => e.what === 'disk-full').map((e) => e.step)).toEqual([0, 0, 0, 0, 0]);
      expect([...f.applied.values()]).toEqual([1, 1]);
      expect(f.records.map((r) => r.record.step)).toEqual([0, 1]);
      const children = await outageChildren(t.client, handle);
      expect(children.length).toBe(1);
    });
  });
});

/** The validator's message: the client wraps it as the cause of WorkflowUpdateFailedError. */
async function updateError(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    return String((err as { cause?: Error }).cause?.message ?? (err as Error).message);
  }
  return 'no error';
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until the run reports `status`, then checks the Web UI's search attribute says the same. */
async function waitForStatus(handle: WorkflowHandle<typeof TrainRun>, status: string): Promise<void> {
  await waitFor(async () => (await handle.query(progressQuery)).status === status);
  expect((await handle.describe()).typedSearchAttributes.get(SA.status)).toBe(status);
}

async function waitFor(pred: () => Promise<boolean>, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await sleep(100);
  }
}

describeWithStack('TrainRun cost ledger and budgets (fake activities, real dev server)', ['temporalBinary'], () => {
  async function until(check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error('timed out waiting');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  // This test's workers serve the default namespace, which no other test here uses.

  test('a budget reached pauses the run as budget-exhausted; a bad raise is refused; a raise resumes it; costs add up', async () => {
    const sandboxCost = { containers: 2, container_s: 1.25, cpu_s: 0.5 };
    const trainerCost = { cpu_s: 3, gpu_s: 0 };
    // 2 tasks x 3 rollouts a step, 10 completion tokens each: 60 tokens generated a step. The budget of 100
    // is reached after step 1 (120), so the run waits before step 2.
    const f = makeFakes({ orchestrator: { max_steps: 3, async_level: 0 }, budget: { max_tokens_generated: 100 }, sandboxCost, trainerCost });
    await withFakeWorkers(world, f, {}, async () => {
      const runId = `budget-${process.pid}`;
      // continueAsNewEvery 1: the run's cost is carried across continue-as-new.
      const handle = await world.env.client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, continueAsNewEvery: 1 }],
      });
      await until(async () => (await handle.query(progressQuery)).status === 'budget-exhausted');
      const p = await handle.query(progressQuery);
      expect(p.step).toBe(2);
      expect(p.budgetExhausted).toEqual({ key: 'tokens_generated', spent: 120, budget: 100 });
      expect(p.cost?.tokens_generated).toBe(120);
      expect(f.records).toHaveLength(2);
      const desc = await handle.describe();
      expect(desc.typedSearchAttributes.get(SA.status)).toBe('budget-exhausted');
      // Nothing of step 2 started while it waits.
      await new Promise((r) => setTimeout(r, 1500));
      expect(f.events.some((e) => e.what === 'rollout-start' && e.step === 2)).toBe(false);

      // resume does not lift a budget; a bad budget is refused by the validator, with the fix.
      const refused = async (name: string, args: Record<string, unknown>) => {
        try {
          await handle.executeUpdate<string, [Record<string, unknown>]>(name, { args: [args] });
        } catch (err) {
          expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
          return ((err as WorkflowUpdateFailedError).cause as Error).message;
        }
        throw new Error('accepted');
      };
      expect(await refused(controlUpdates.resume.name, { reason: 'go on' })).toMatch(/budget-exhausted \(tokens_generated 120 of 100\).*ratchet set .* --budget tokens_generated=/);
      expect(await refused(setSettingsUpdate.name, { budget: { tokens_generated: -5 }, reason: 'x' })).toMatch(/budget tokens_generated must be a number above 0 \(got -5\)/);
      expect(await refused(setSettingsUpdate.name, { budget: { dollars: 5 }, reason: 'x' })).toMatch(/unknown figure dollars/);
      expect((await handle.query(progressQuery)).status).toBe('budget-exhausted');

      await handle.executeUpdate(setSettingsUpdate, { args: [{ budget: { tokens_generated: 1000 }, reason: 'approved', identity: 'alice@h' }] });
      const result = await handle.result();
      expect(result.stepsCompleted).toBe(3);
      expect(f.records).toHaveLength(3);

      // Each step's cost, from what its activities reported (computed here independently).
      const perRollout = 6;
      for (const [i, { record, state }] of f.records.entries()) {
        expect(record.cost).toMatchObject({
          sandbox_containers: perRollout * sandboxCost.containers,
          sandbox_container_s: perRollout * sandboxCost.container_s,
          sandbox_cpu_s: perRollout * sandboxCost.cpu_s,
          trainer_cpu_s: trainerCost.cpu_s,
          trainer_gpu_s: 0,
          tokens_generated: perRollout * 10,
          tokens_trained: 7 * perRollout,
        });
        expect(record.cost!.temporal_events).toBeGreaterThan(0);
        // StepRollouts ran 6 rollout activities at least: 3 events each (scheduled, started, completed).
        expect(record.cost!.temporal_child_events).toBeGreaterThan(3 * perRollout);
        // run_cost: the sum of the records so far; the state file carries it.
        const sum = f.records.slice(0, i + 1).reduce((a, r) => a + r.record.cost!.sandbox_container_s, 0);
        expect(record.run_cost!.sandbox_container_s).toBeCloseTo(sum, 6);
        expect(record.run_cost!.tokens_generated).toBe((i + 1) * 60);
        expect(state.cost).toEqual(record.run_cost);
      }
      // The raise is audited like every control, and in effect from then on.
      const set = f.records[2]!.record.control!.find((c) => c.action === 'set')!;
      expect([set.identity, set.reason, set.changes]).toEqual(['alice@h', 'approved', { budget: { tokens_generated: 1000 } }]);
      expect(f.records[2]!.record.overrides).toEqual({ budget: { tokens_generated: 1000 } });
      await recordHistory(world.env.client.workflow.getHandle(runId), 'trainrun-budget-exhausted');
    });
  });
});

describeWithStack('TrainRun difficulty filtering and pass-rate pools (fake activities, real dev server)', ['temporalBinary'], () => {
  /** Tasks whose rollouts score 0 and 1 alternately (informative); every other task scores 0 on every rollout. */
  const rewardFrom = (informative: Set<string>) => (input: RolloutInput): number =>
    (informative.has(taskIdOf(input.task)) ? input.rolloutIndex % 2 : 0);

  // The tests run at once (test.concurrent), each in a namespace of its own.
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

describeWithStack('TrainRun, trainer.mode = "full" (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (a 5 s inference wait, round trips), so they run at once (test.concurrent), each in a namespace of its own.
  const withFakes = <T>(fakes: ReturnType<typeof makeFakes>, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, fakes, { trainers: ['w1'], namespace: ns }, (f, stack) => fn(f, stack.client)));
  const withWorkers = <T>(opts: FakeOptions, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> => withFakes(makeFakes(opts), fn);

  let n = 0;
  const run = async (opts: FakeOptions) => withWorkers(opts, async (f, client) => {
    const runId = `full-${process.pid}-${++n}`;
    const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
    });
    const result = await handle.result();
    return { f, runId, result };
  });

  test.concurrent('each sync reloads the full weights of its version from that version\'s checkpoint; rollouts ask for the served model', async () => {
    const { f, result } = await run({ trainer: { mode: 'full' }, orchestrator: { max_steps: 3, async_level: 1 } });
    expect(result).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
    const served = f.config.inference.served_model;
    // Version 0 (the base model) before the first rollout, then each step's version from the checkpoint it saved.
    expect(f.syncs.map((s) => [s.policyVersion, s.full, s.checkpoint?.uri, s.adapter])).toEqual([
      [0, true, undefined, undefined],
      [1, true, expect.stringContaining('ckpt-step-0'), undefined],
      [2, true, expect.stringContaining('ckpt-step-1'), undefined],
      [3, true, expect.stringContaining('ckpt-step-2'), undefined],
    ]);
    expect(f.manifestInputs.map((m) => m.modelName)).toEqual([served, served, served]);
    expect(f.records.map((r) => r.record.adapter)).toEqual([undefined, undefined, undefined]);
  });

  test.concurrent('a replica restarted mid-step (back on the base model) is noticed by the rollouts and re-synced with the step\'s checkpoint before they sample', async () => {
    const fakes = makeFakes({ trainer: { mode: 'full' }, orchestrator: { max_steps: 3 } });
    // One replica's weights: what the last sync loaded; the rollouts check them as src/agent/servedWeights.ts does.
    let served = 'base';
    const sampledFrom: { step: number; expected: string; served: string }[] = [];
    const sync = fakes.main.syncWeights;
    fakes.main.syncWeights = async (i) => { const r = await sync(i); served = i.checkpoint?.uri ?? 'base'; return r; };
    const rollout = fakes.rollout.rollout;
    let started = 0;
    fakes.rollout.rollout = async (i) => {
      // vLLM restarts after step 1's first rollout: it comes back on the base model.
      if (i.step === 1 && ++started === 2) served = 'base';
      const expected = i.fullWeights?.checkpoint ?? 'base';
      if (served !== expected) {
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.create({ type: 'InferenceUnavailable', message: `replica serves ${served}, not ${expected} (fake)` });
      }
      sampledFrom.push({ step: i.step, expected, served });
      return rollout(i);
    };
    await withFakes(fakes, async (f, client) => {
      const runId = `full-${process.pid}-${++n}`;
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
      });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      // Each step's manifest names the checkpoint its version serves (none at version 0).
      expect(f.manifestInputs.map((m) => m.fullWeights?.checkpoint)).toEqual([undefined, expect.stringContaining('ckpt-step-0'), expect.stringContaining('ckpt-step-1')]);
      // Version 1 synced once for step 1, then again after the restart (the chunk's InferenceUnavailable), same checkpoint.
      const v1 = f.syncs.filter((s) => s.policyVersion === 1);
      expect(v1.map((s) => [s.full, s.checkpoint?.uri])).toEqual([[true, expect.stringContaining('ckpt-step-0')], [true, expect.stringContaining('ckpt-step-0')]]);
      expect(f.syncs.map((s) => s.policyVersion)).toEqual([0, 1, 1, 2, 3]);
      // Every rollout sampled from its own version's weights, and every rollout of the run ran.
      expect(sampledFrom.filter((r) => r.served !== r.expected)).toEqual([]);
      const total = f.config.orchestrator.batch_size * f.config.orchestrator.rollouts_per_example;
      expect(new Set(sampledFrom.map((r) => `${r.step}`)).size).toBe(3);
      expect(sampledFrom.length).toBe(3 * total);
    });
  });

  test.concurrent('ratchet set --eval-every on a full run is refused by the update\'s validator, with the fix', async () => {
    await withWorkers({ trainer: { mode: 'full' }, inferenceDownTimes: 1 }, async (_f, client) => {
      const runId = `full-${process.pid}-${++n}`;
      const handle = await client.workflow.start<typeof TrainRun>('TrainRun', {
        taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId }],
      });
      // The version-0 sync fails once: the run waits (5 s) with its config loaded.
      while ((await handle.query(progressQuery)).status !== 'waiting-for-inference') await new Promise((r) => setTimeout(r, 100));
      const err = await handle.executeUpdate(setSettingsUpdate, { args: [{ eval_every_steps: 2, reason: 'see progress' }] }).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(WorkflowUpdateFailedError);
      expect(((err as WorkflowUpdateFailedError).cause as Error).message).toMatch(/^eval_every_steps: a full fine-tuning run .*Fix: evaluate its checkpoints on a vLLM of their own/);
      await handle.executeUpdate(setSettingsUpdate, { args: [{ eval_every_steps: 0, reason: 'off is fine' }] });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, stopped: 'completed' });
    });
  });

  test.concurrent('a LoRA run is unchanged: adapter syncs without `full`, rollouts on <run>/policy-v<N>', async () => {
    const { f, runId } = await run({ orchestrator: { max_steps: 2 } });
    expect(f.syncs.map((s) => [s.policyVersion, 'full' in s, s.adapter?.uri])).toEqual([
      [1, false, expect.stringContaining('adapter-step-0')],
      [2, false, expect.stringContaining('adapter-step-1')],
    ]);
    expect(f.manifestInputs.map((m) => m.modelName)).toEqual([f.config.inference.served_model, `${runId}/policy-v1`]);
  });
});

describeWithStack('init_from (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait (heartbeat timeouts, round trips), so they run at once (test.concurrent), each in a namespace of its own.

  const withWorkers = <T>(opts: FakeOptions, fn: (fakes: ReturnType<typeof makeFakes>, client: Client) => Promise<T>): Promise<T> =>
    inNamespace(world, (ns) => withFakeWorkers(world, makeFakes({ initFrom: true, ...opts }), { trainers: ['w1', 'w2', 'w3'], namespace: ns },
      (f, stack) => fn(f, stack.client)));

  let n = 0;
  async function start(client: Client, type: 'TrainRun' | 'SftRun', input: Partial<TrainRunInput> = {}): Promise<WorkflowHandleWithFirstExecutionRunId<typeof TrainRun>> {
    const runId = `init-${process.pid}-${++n}`;
    return client.workflow.start<typeof TrainRun>(type, {
      taskQueue: 'ratchet', workflowId: runId, args: [{ configPath: 'configs/fake.toml', runId, ...input }],
    });
  }

  test.concurrent('TrainRun: the origin reaches trainer.load; version 0 is its adapter, served first and kept for the rollouts ahead', async () => {
    await withWorkers({ orchestrator: { max_steps: 3, async_level: 1 } }, async (f, client) => {
      const handle = await start(client, 'TrainRun');
      const runId = handle.workflowId;
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3, stopped: 'completed' });
      // Loaded once, without a checkpoint, with the origin as its initial adapter.
      expect(f.loads).toEqual([{ worker: 'w1', checkpoint: undefined, lossKind: 'grpo', init: FAKE_INIT }]);
      // The first weight sync serves version 0 from the origin's adapter, before any rollout.
      expect(f.syncs[0]).toMatchObject({ policyVersion: 0, adapter: FAKE_INIT.adapter, keepFromVersion: 0 });
      const firstSync = f.events.findIndex((e) => e.what === 'sync');
      const firstRollout = f.events.findIndex((e) => e.what === 'rollout-start');
      expect(firstSync).toBeGreaterThanOrEqual(0);
      expect(firstSync).toBeLessThan(firstRollout);
      // Version 0's rollouts ask for <run>/policy-v0, not the base model.
      const v0 = f.rolloutInputs.filter((r) => r.policyVersion === 0);
      expect(v0.length).toBeGreaterThan(0);
      expect(new Set(v0.map((r) => r.modelName))).toEqual(new Set([adapterName(runId, 0)]));
      // async_level 1: step 1's rollouts ran on version 0 while step 0 trained; the sync of version 1 keeps version 0.
      expect(f.syncs.map((s) => [s.policyVersion, s.keepFromVersion, s.adapter?.uri])).toEqual([
        [0, 0, FAKE_INIT.adapter.uri], [1, 0, 'file:///fake/adapter-step-0'], [2, 0, 'file:///fake/adapter-step-1'], [3, 1, 'file:///fake/adapter-step-2']]);
      // A fresh ledger: steps 0..2 of this run, each applied once, versions from 1.
      expect(f.records.map((r) => [r.record.step, r.record.policy_version])).toEqual([[0, 1], [1, 2], [2, 3]]);
      expect([...f.applied.values()]).toEqual([1, 1, 1]);
      for (const r of f.records) {
        expect(r.record.lineage?.trainer.init_from).toEqual({
          from: 'sft-1', run_id: 'sft-1', step: 4, checkpoint_sha256: FAKE_INIT.checkpoint.sha256, adapter_sha256: FAKE_INIT.adapter.sha256,
        });
      }
      await recordHistory(handle, 'trainrun-init-from');
    });
  });

  test.concurrent('TrainRun: a replaced trainer reloads the run\'s own checkpoint without init; a fallback to "the base model" takes init again', async () => {
    await withWorkers({ orchestrator: { max_steps: 3 }, deadTrainers: ['w1'], deadFromStep: 1, corruptCheckpoints: [0] }, async (f, client) => {
      const handle = await start(client, 'TrainRun', { trainerTimeouts: { heartbeat: '1 second', scheduleToStart: '2 seconds' } });
      expect(await handle.result()).toMatchObject({ stepsCompleted: 3, policyVersion: 3 });
      // w1 starts from init and dies in step 1; w2 finds step 0's checkpoint corrupt; the run falls back to
      // its start, which is the origin's adapter: w2 loads init again (no checkpoint), and version 0 is served from it again.
      // A load repeated back to back is one load retried (1 s heartbeats time out on a loaded machine): counted once.
      const loads = f.loads.map((l) => [l.worker, l.checkpoint?.uri ?? null, l.init ? 'init' : null]);
      expect(loads.filter((l, i) => i === 0 || JSON.stringify(l) !== JSON.stringify(loads[i - 1]))).toEqual([
        ['w1', null, 'init'], ['w2', 'file:///fake/ckpt-step-0', null], ['w2', null, 'init'],
      ]);
      expect(f.fallbacks[0]!.result).toMatchObject({ fellBack: true, record: { retrained_steps: [0] }, state: { nextStep: 0, policyVersion: 0 } });
      expect(f.syncs.filter((s) => s.policyVersion === 0).map((s) => s.adapter?.uri)).toEqual([FAKE_INIT.adapter.uri, FAKE_INIT.adapter.uri]);
      await recordHistory(handle, 'trainrun-init-from-fallback');
    });
  });

  test.concurrent('SftRun: starts from the origin too (trainer.load init, version 0 served first)', async () => {
    await withWorkers({ sft: { batch_size: 2 }, orchestrator: { max_steps: 2 } }, async (f, client) => {
      const handle = await start(client, 'SftRun');
      expect(await handle.result()).toMatchObject({ stepsCompleted: 2, policyVersion: 2 });
      expect(f.loads).toEqual([{ worker: 'w1', checkpoint: undefined, lossKind: 'sft', init: FAKE_INIT }]);
      expect(f.syncs.map((s) => [s.policyVersion, s.adapter?.uri])).toEqual([[0, FAKE_INIT.adapter.uri], [1, 'file:///fake/adapter-step-0'], [2, 'file:///fake/adapter-step-1']]);
      await recordHistory(handle, 'sftrun-init-from');
    });
  });

  test.concurrent('without init_from nothing changes: loads carry no init, version 0 is the base model and is never synced', async () => {
    await withWorkers({ initFrom: false, orchestrator: { max_steps: 1 } }, async (f, client) => {
      const handle = await start(client, 'TrainRun');
      await handle.result();
      expect(f.loads.map((l) => 'init' in l)).toEqual([false]);
      expect(f.syncs.map((s) => s.policyVersion)).toEqual([1]);
      expect(new Set(f.rolloutInputs.map((r) => r.modelName))).toEqual(new Set([f.config.inference.served_model]));
    });
  });
});
