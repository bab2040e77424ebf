/**
 * StepRollouts: one step's rollouts as a child of TrainRun, so the parent's history grows
 * by a handful of events per step however many rollouts there are (issue 24; patch
 * v0.6-step-chunks). The step manifest (tasks and settings) is in the artifact store; the
 * rollouts run in chunks, in StepRollouts itself or over RolloutShard children
 * (./rolloutShard.ts), and the parent hears progress at most ~8 times a step.
 */
import {
  ApplicationFailure,
  condition,
  deprecatePatch,
  getExternalWorkflowHandle,
  log,
  patched,
  setHandler,
  startChild,
  workflowInfo,
  type ChildWorkflowHandle,
} from '@temporalio/workflow';
import { fanoutPlan } from '../config/fanout';
import type { ShardStatusSignal, StepChunksContext } from '../contracts/chunks';
import { boundedHosts, type StepRolloutsInput, type StepRolloutsResult } from '../contracts/step';
import { trainingPriority } from '../shared/fairness';
import { forActivity, livenessOf } from '../shared/liveness';
import { syncQuorum } from '../shared/replicas';
import { rolloutProgressSignal, shardStatusSignal } from './messages';
import { DEPRECATED_PATCHES, PATCHES } from './patches';
import { NO_WAITS, RolloutShard, joinSummaries, runChunks, waiterFor, type Waits } from './rolloutShard';

export async function StepRollouts(input: StepRolloutsInput): Promise<StepRolloutsResult> {
  // The pre-0.6 per-rollout window (tasks inline, one activity per rollout) is gone (docs/upgrades.md,
  // "The per-rollout fan-out"): TrainRun always sends the step manifest.
  deprecatePatch(DEPRECATED_PATCHES.stepChunks);
  if (!input.manifest) {
    throw ApplicationFailure.nonRetryable(`StepRollouts of step ${input.step} of run ${input.runId} got no step manifest: the per-rollout fan-out ` +
      '(orchestrator.rollouts_per_chunk = 0, tasks inline) was removed in 0.8. Fix: restart the run on this build (`ratchet restart`), ' +
      'which resumes it from its last completed step in chunks (docs/upgrades.md)', 'InvalidRolloutInput');
  }
  const manifest = input.manifest;
  const o = input.config.orchestrator;
  const total = (input.taskCount ?? 0) * o.rollouts_per_example;
  const plan = fanoutPlan(total, o);
  const windows = livenessOf(input.config);
  const ctx: StepChunksContext = {
    runId: input.runId, step: input.step, manifest, total, perChunk: plan.perChunk,
    policyVersion: input.policyVersion, ...(input.adapter ? { adapter: input.adapter } : {}), ...(input.full ? { full: input.full } : {}), keepFromVersion: input.keepFromVersion,
    baseUrls: input.config.inference.base_urls, syncTaskQueues: input.config.inference.sync_task_queues ?? [],
    // A weight sync that reaches a quorum of replicas lets the chunks go on (the replica pool, src/agent/replicaPool.ts).
    syncQuorum: syncQuorum(input.config.inference),
    weightSyncLiveness: forActivity(windows, 'weight_sync'), fairnessWeight: o.fairness_weight,
    ...(input.artifacts ? { artifacts: input.artifacts } : {}),
    ...(input.outageWaits ? { outageWaits: input.outageWaits } : {}),
    ...(input.rolloutWorkersWatchS !== undefined ? { rolloutWorkersWatchS: input.rolloutWorkersWatchS } : {}),
    ...(input.rolloutHeartbeat !== undefined ? { rolloutHeartbeat: input.rolloutHeartbeat } : {}),
    ...(input.round ? { round: input.round } : {}),
  };
  const parent = input.parentWorkflowId ? getExternalWorkflowHandle(input.parentWorkflowId) : undefined;
  let shown: Waits = { ...NO_WAITS };
  let shownDone = -1;
  const report = async (done: number, waits: Waits): Promise<void> => {
    if (!parent) return;
    shown = waits;
    shownDone = done;
    try {
      await parent.signal(rolloutProgressSignal, { step: input.step, done, total, ...waits });
    } catch (err) {
      log.warn('could not report rollout progress to the parent', { error: String(err) });
    }
  };
  const ownWaits: Partial<Waits> = {};
  const waiter = waiterFor(ctx, (w) => { Object.assign(ownWaits, w); void report(shownDone < 0 ? 0 : shownDone, { ...shown, ...w }); });

  if (plan.shards === 1) {
    const { parts, done } = await runChunks(ctx, 0, plan.chunks, plan.windowPerShard, report, () => false, 0);
    log.info('step rollouts done (chunks)', { step: input.step, total, chunks: plan.chunks, historyLength: workflowInfo().historyLength });
    const summaries = await joinSummaries(ctx, waiter, parts);
    return { summaries, count: done, events: workflowInfo().historyLength };
  }

  // Shards: each signals its status here; what changed goes on to TrainRun (done at most ~8 times a step).
  const statuses = new Map<number, ShardStatusSignal>();
  let dirty = false;
  setHandler(shardStatusSignal, (s) => {
    statuses.set(s.shard, s);
    dirty = true;
  });
  const info = workflowInfo();
  const startShard = (s: number): Promise<ChildWorkflowHandle<typeof RolloutShard>> => {
    const firstChunk = s * plan.chunksPerShard;
    return startChild(RolloutShard, {
      args: [{ ctx, shard: s, firstChunk, endChunk: Math.min(firstChunk + plan.chunksPerShard, plan.chunks), window: plan.windowPerShard, parentWorkflowId: info.workflowId,
        ...(input.shardEventsBeforeContinue !== undefined ? { eventsBeforeContinue: input.shardEventsBeforeContinue } : {}) }],
      workflowId: `${info.workflowId}-shard-${s}`,
      taskQueue: info.taskQueue,
      priority: trainingPriority(input.runId, o.fairness_weight),
    });
  };
  const handles: ChildWorkflowHandle<typeof RolloutShard>[] = [];
  if (patched(PATCHES.shardsStartTogether)) {
    // Every start command in one workflow task: the shards begin together, not one round trip apart.
    handles.push(...(await Promise.all(Array.from({ length: plan.shards }, (_, s) => startShard(s)))));
  } else {
    for (let s = 0; s < plan.shards; s++) handles.push(await startShard(s));
  }
  let finished = false;
  const results = Promise.all(handles.map((h) => h.result())).finally(() => { finished = true; });
  const stride = Math.max(1, Math.ceil(total / 8));
  const forward = async (): Promise<void> => {
    while (!finished) {
      await condition(() => finished || dirty);
      if (!dirty) continue;
      dirty = false;
      const all = [...statuses.values()];
      const done = all.reduce((a, s) => a + s.done, 0);
      const waits: Waits = {
        waitingForInference: all.some((s) => s.waitingForInference === true),
        waitingForDisk: all.some((s) => s.waitingForDisk === true) || ownWaits.waitingForDisk === true,
        waitingForStore: all.some((s) => s.waitingForStore === true) || ownWaits.waitingForStore === true,
        waitingForRolloutWorkers: all.some((s) => s.waitingForRolloutWorkers === true),
      };
      const hosts = all.flatMap((s) => (s.waitingForRolloutWorkers ? s.unhealthyRolloutHosts ?? [] : []));
      if (hosts.length) waits.unhealthyRolloutHosts = boundedHosts([...new Map(hosts.map((h) => [h.host, h])).values()]);
      const changed = (Object.keys(waits) as (keyof Waits)[]).some((k) => JSON.stringify(waits[k]) !== JSON.stringify(shown[k]));
      if (changed || Math.floor(done / stride) > Math.floor(Math.max(shownDone, 0) / stride)) await report(done, waits);
    }
  };
  const forwarding = forward();
  const shardResults = await results;
  await forwarding;
  const count = shardResults.reduce((a, r) => a + r.count, 0);
  await report(count, { ...NO_WAITS });
  log.info('step rollouts done (shards)', { step: input.step, total, shards: plan.shards, historyLength: workflowInfo().historyLength });
  const summaries = await joinSummaries(ctx, waiter, shardResults.map((r) => r.summaries));
  return { summaries, count, events: workflowInfo().historyLength + shardResults.reduce((a, r) => a + (r.events ?? 0), 0) };
}
