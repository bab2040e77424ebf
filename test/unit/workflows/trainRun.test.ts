/**
 * TrainRun against a real Temporal dev server (the PyPI CLI, never downloaded)
 * with fake activities: the loop, async overlap, control updates, progress,
 * continue-as-new, a dead trainer and a down inference server.
 * Set RATCHET_RECORD_HISTORIES=1 to record histories into test/fixtures/histories/<release>/ for the replay test.
 */
import type { Client, WorkflowHandle, WorkflowHandleWithFirstExecutionRunId } from '@temporalio/client';
import { describeWithStack } from '../../helpers/stack';
import { SA, pauseUpdate, progressQuery, resumeUpdate, stopAfterCurrentStepUpdate } from '../../../src/workflows/messages';
import type { TrainRun } from '../../../src/workflows/trainRun';
import type { ReleaseRunInput, ReleaseRunResult, TrainRunInput } from '../../../src/contracts';
import { inNamespace, makeFakes, useFakeWorld, withFakeWorkers, type FakeOptions, type TestNamespace } from '../../helpers/fakeWorld';
import { recordHistory } from '../../helpers/histories';
import { TRAINING_PRIORITY } from '../../../src/shared/fairness';

jest.setTimeout(120_000);

describeWithStack('TrainRun workflow (fake activities, real dev server)', ['temporalBinary'], () => {
  // The tests mostly wait on timers and the server, so they run at once (test.concurrent), each in a namespace of its own.
  const world = useFakeWorld({ concurrent: 5 });

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
