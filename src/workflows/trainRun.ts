/**
 * TrainRun: the durable RL loop of DESIGN.md. Each step: sample → rollouts
 * (StepRollouts child) → build batch → trainer step → save → weight sync →
 * metrics. Steps overlap by `async_level`: the next step's rollouts start before
 * this step trains. Continue-as-new every K steps (or when the server suggests
 * it) carries only ResumeState; everything large lives in the artifact store.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowHandle,
  TimeoutFailure,
  condition,
  continueAsNew,
  log,
  proxyActivities,
  setHandler,
  setCurrentDetails,
  sleep,
  startChild,
  upsertSearchAttributes,
  workflowInfo,
  isCancellation,
} from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import { storeSettings } from '../artifacts/settings';
import { adapterName } from '../shared/adapters';
import { forActivity, livenessOf } from '../shared/liveness';
import type { RunConfig } from '../config/schema';
import type { RolloutSummary } from '../rollouts/trajectory';
import type { MainActivities } from '../activities';
import type { RunStateFile } from '../activities/config';
import type { StepRecord } from '../activities/metrics';
import type { BatchActivities, TrainerActivities, TrainerStepMetrics } from './activityTypes';
import {
  SA,
  pauseUpdate,
  progressQuery,
  resumeUpdate,
  rolloutProgressSignal,
  stopAfterCurrentStepUpdate,
} from './messages';
import { detailsMarkdown, rolloutStats } from './stats';
import { StepRollouts, type StepRolloutsInput, type StepRolloutsResult } from './stepRollouts';
import { toTrainerConfig } from './trainerConfig';
import { pickResume, type LoadedConfig, type Phase, type Progress, type ResumeState, type RunStatus, type SampledTask, type StepSummary, type TrainerTimeouts, type TrainRunInput, type TrainRunResult } from './types';

const light = proxyActivities<MainActivities & BatchActivities>({
  startToCloseTimeout: '10 minutes',
  retry: { initialInterval: '1 second', maximumInterval: '30 seconds', maximumAttempts: 10 },
});

const sync = proxyActivities<MainActivities>({
  startToCloseTimeout: '5 minutes',
  heartbeatTimeout: '1 minute',
  retry: { maximumAttempts: 3 },
});

/** An inference host's worker (src/workers/inference.ts): a host that is down is noticed by schedule-to-start. */
function syncOn(taskQueue: string) {
  return proxyActivities<MainActivities>({
    taskQueue,
    scheduleToStartTimeout: '2 minutes',
    startToCloseTimeout: '10 minutes',
    heartbeatTimeout: '1 minute',
    retry: { maximumAttempts: 3 },
  });
}

/** Only `trainer.announce` goes to the shared queue; it waits as long as it takes for a trainer to appear. */
const announcer = proxyActivities<TrainerActivities>({
  taskQueue: 'ratchet-trainer',
  startToCloseTimeout: '1 minute',
  retry: { initialInterval: '2 seconds', maximumInterval: '30 seconds' },
});

/**
 * The trainer's own queue: a dead trainer shows up as a schedule-to-start or heartbeat timeout, not a hang.
 * The trainer heartbeats every ~10 s from a liveness thread however slow a micro-batch is, and stops when
 * its watchdog sees no progress (trainer/ratchet_trainer/liveness.py): a hung trainer times out too.
 */
function trainerOn(taskQueue: string, t: TrainerTimeouts = {}) {
  return proxyActivities<TrainerActivities>({
    taskQueue,
    scheduleToStartTimeout: t.scheduleToStart ?? '1 minute',
    startToCloseTimeout: '2 hours',
    heartbeatTimeout: t.heartbeat ?? '1 minute',
    retry: { maximumAttempts: 2 },
  });
}

// Loading a checkpoint and saving one heartbeat the same way; they may take a while on CPU.
function trainerIoOn(taskQueue: string, t: TrainerTimeouts = {}) {
  return proxyActivities<TrainerActivities>({
    taskQueue,
    scheduleToStartTimeout: t.scheduleToStart ?? '1 minute',
    startToCloseTimeout: '20 minutes',
    heartbeatTimeout: t.heartbeat ?? '1 minute',
    retry: { maximumAttempts: 2 },
  });
}

interface PendingRollouts {
  step: number;
  policyVersion: number;
  tasks: SampledTask[];
  handle: ChildWorkflowHandle<typeof StepRollouts>;
  scope: CancellationScope;
  startedAt: number;
}

const isTrainerGone = (err: unknown): boolean =>
  err instanceof ActivityFailure && (err.cause instanceof TimeoutFailure);

export async function TrainRun(input: TrainRunInput): Promise<TrainRunResult> {
  const info = workflowInfo();
  const runId = input.runId ?? info.workflowId;

  // ---- state the queries and updates see ----
  // eslint-disable-next-line prefer-const -- the handlers above read it; the end of the run sets it
  let finalStatus: 'completed' | 'stopped' | undefined;
  let started = false;
  let waitingForTrainer = false;
  let phase: Phase = 'init';
  let step = input.resume?.nextStep ?? 0;
  let maxSteps = 0;
  let policyVersion = input.resume?.policyVersion ?? 0;
  let lastStep: StepSummary | undefined;
  let pauseRequested = false;
  let stopRequested = false;
  const rolloutCounts = new Map<number, { done: number; total: number }>();
  let waitingForInference = false;
  let waitingForStore = false;
  let prefetchedStep: number | undefined;

  // Derived, never assigned: whatever the run is doing, the flags say it.
  const status = (): RunStatus => {
    if (finalStatus) return finalStatus;
    if (stopRequested) return 'stopping';
    if (pauseRequested) return 'paused';
    if (waitingForStore) return 'waiting-for-store';
    if (waitingForInference) return 'waiting-for-inference';
    if (waitingForTrainer) return 'waiting-for-trainer';
    return started ? 'running' : 'starting';
  };

  const progress = (): Progress => ({
    runId,
    step,
    maxSteps,
    phase,
    status: status(),
    rolloutsDone: rolloutCounts.get(step)?.done ?? 0,
    rolloutsTotal: rolloutCounts.get(step)?.total ?? 0,
    policyVersion,
    lastStep,
    prefetchedStep,
  });

  setHandler(progressQuery, progress);
  setHandler(rolloutProgressSignal, (p) => {
    rolloutCounts.set(p.step, { done: p.done, total: p.total });
    if (p.waitingForInference !== undefined && p.waitingForInference !== waitingForInference) {
      waitingForInference = p.waitingForInference;
      publish();
    }
  });
  setHandler(pauseUpdate, () => {
    pauseRequested = true;
    publish();
    return status();
  }, {
    validator: () => {
      if (finalStatus) throw new Error(`run ${runId} is ${finalStatus}; nothing to pause`);
      if (pauseRequested) throw new Error(`run ${runId} is already paused; send resume to continue`);
      if (stopRequested) throw new Error(`run ${runId} is stopping after the current step; it cannot be paused`);
    },
  });
  setHandler(resumeUpdate, () => {
    pauseRequested = false;
    publish();
    return status();
  }, {
    validator: () => {
      if (!pauseRequested) throw new Error(`run ${runId} is not paused (status ${status()}); nothing to resume`);
    },
  });
  setHandler(stopAfterCurrentStepUpdate, () => {
    stopRequested = true;
    // A paused run stops at once: it is between steps already.
    pauseRequested = false;
    publish();
    return status();
  }, {
    validator: () => {
      if (finalStatus) throw new Error(`run ${runId} is already ${finalStatus}`);
      if (stopRequested) throw new Error(`run ${runId} is already stopping after the current step`);
    },
  });

  // Search attributes and the Web UI's details, rewritten only when they change (each upsert is an event).
  let published = '';
  function publish(): void {
    const p = progress();
    const key = JSON.stringify([p.step, p.status, p.policyVersion, lastStep?.meanReward]);
    if (key !== published) {
      published = key;
      upsertSearchAttributes([
        { key: SA.step, value: p.step },
        { key: SA.status, value: p.status },
        { key: SA.policyVersion, value: p.policyVersion },
        ...(lastStep ? [{ key: SA.meanReward, value: lastStep.meanReward }] : []),
      ]);
    }
    setCurrentDetails(detailsMarkdown({
      ...p, lastReward: lastStep?.meanReward, lastComponents: lastStep?.components,
    }));
  }

  /**
   * Runs an activity call; while the artifact store is unreachable (StoreUnavailable)
   * the run waits with status `waiting-for-store` and tries again, never failing
   * and losing nothing (every write is atomic and keyed, so a retry redoes it whole).
   * With the store up this adds no command: replay of older histories is unchanged.
   */
  async function untilStore<T>(call: () => Promise<T>): Promise<T> {
    for (let wait = 2; ; wait = Math.min(wait * 2, 30)) {
      try {
        const r = await call();
        if (waitingForStore) {
          waitingForStore = false;
          publish();
          log.info('the artifact store is back; the run goes on');
        }
        return r;
      } catch (err) {
        if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'StoreUnavailable')) throw err;
        if (!waitingForStore) {
          waitingForStore = true;
          publish();
          log.warn('the artifact store is unreachable; the run waits for it', { error: err.cause.message });
        }
        await sleep(`${wait} seconds`);
      }
    }
  }

  // ---- open the run: config (validated, stored, hashed) and where to start ----
  let loaded: LoadedConfig;
  let resume: ResumeState | undefined = input.resume;
  if (resume) {
    const settings = resume.artifacts;
    const config = await untilStore(() => light.readConfig(resume!.configRef, settings));
    loaded = { runId, config, configRef: resume.configRef, configSha256: resume.configRef.sha256 };
  } else {
    const opened = await untilStore(() => light.openRun({ configPath: input.configPath, runId }));
    loaded = opened.loaded;
    resume = opened.resume;
  }
  const config: RunConfig = loaded.config;
  const artifacts = storeSettings(config.artifacts);
  const orch = config.orchestrator;
  maxSteps = orch.max_steps;
  step = resume?.nextStep ?? 0;
  policyVersion = resume?.policyVersion ?? 0;
  let checkpoint: ArtifactRef | undefined = resume?.checkpoint;
  let adapter: ArtifactRef | undefined = resume?.adapter;
  const seed = resume?.seed ?? orch.seed;
  if (resume?.lastMeanReward !== undefined) {
    lastStep = { step: step - 1, meanReward: resume.lastMeanReward, components: {}, rollouts: 0, dropped: 0, policyVersion };
  }
  const asyncLevel = orch.async_level;
  const windows = livenessOf(config);
  const canEvery = input.continueAsNewEvery ?? orch.continue_as_new_every;
  let taskSetDir = '';
  const keepFrom = () => Math.max(1, policyVersion - asyncLevel - 1);
  const modelFor = (v: number) => (v === 0 ? config.inference.served_model : adapterName(runId, v));
  started = true;
  publish();

  /**
   * Weight sync: by the main worker (vLLM reads the adapter path: one machine or a shared
   * disk), or, with inference.sync_task_queues, by each inference host's own worker,
   * which pulls the adapter from the store into its cache first. Slowest host's time.
   */
  async function syncAllHosts(req: Parameters<MainActivities['syncWeights']>[0]): Promise<{ ms: number }> {
    const queues = config.inference.sync_task_queues ?? [];
    if (queues.length === 0) return sync.syncWeights(req);
    const results = await Promise.all(queues.map((q) => syncOn(q).syncWeights({ ...req, baseUrls: [] })));
    return { ...results[0]!, ms: Math.max(...results.map((r) => r.ms)) };
  }

  // Weight sync that waits out a down inference server instead of failing the run.
  async function syncUntilServed(): Promise<{ ms: number } | undefined> {
    for (let wait = 5; ; wait = Math.min(wait * 2, 60)) {
      try {
        const r = await untilStore(() => syncAllHosts({ runId, baseUrls: config.inference.base_urls, policyVersion, adapter, keepFromVersion: keepFrom(), artifacts, liveness: forActivity(windows, 'weight_sync') }));
        if (waitingForInference) {
          waitingForInference = false;
          publish();
        }
        return r;
      } catch (err) {
        const hostDown = err instanceof ActivityFailure && err.cause instanceof TimeoutFailure && (config.inference.sync_task_queues ?? []).length > 0;
        if (!hostDown && !(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'InferenceUnavailable')) throw err;
        if (!waitingForInference) {
          waitingForInference = true;
          publish();
          log.warn('inference is down; the run waits for it', { error: String(err.cause?.message ?? err) });
        }
        await sleep(`${wait} seconds`);
      }
    }
  }

  // ---- trainer: a stateful worker on its own queue; re-announced and reloaded when it dies ----
  let trainerQueue: string | undefined;
  async function ensureTrainer(): Promise<string> {
    if (trainerQueue) return trainerQueue;
    waitingForTrainer = true;
    publish();
    const { task_queue, worker_id } = await announcer['trainer.announce']({});
    const loadedState = await untilStore(() => trainerIoOn(task_queue, input.trainerTimeouts)['trainer.load']({ run_id: runId, trainer_config: toTrainerConfig(config), checkpoint, store: artifacts, liveness: forActivity(windows, 'trainer') }));
    if (loadedState.policy_version !== policyVersion) {
      throw ApplicationFailure.nonRetryable(
        `trainer ${worker_id} loaded policy version ${loadedState.policy_version} from ${checkpoint?.uri ?? 'the base model'}, but the run is at version ${policyVersion}`,
        'TrainerStateMismatch');
    }
    log.info('trainer ready', { worker_id, task_queue, policyVersion });
    trainerQueue = task_queue;
    waitingForTrainer = false;
    publish();
    return task_queue;
  }

  async function trainAndSave(s: number, batch: ArtifactRef, manifest: ArtifactRef): Promise<{ metrics: TrainerStepMetrics; saved: { checkpoint: ArtifactRef; adapter: ArtifactRef; policy_version: number }; restarts: number }> {
    for (let restarts = 0; ; restarts++) {
      try {
        const q = await ensureTrainer();
        phase = 'training';
        const metrics = await untilStore(() => trainerOn(q, input.trainerTimeouts)['trainer.step']({ run_id: runId, step: s, batch, manifest, store: artifacts, liveness: forActivity(windows, 'trainer') }));
        phase = 'saving';
        const saved = await untilStore(() => trainerIoOn(q, input.trainerTimeouts)['trainer.save']({ run_id: runId, step: s, store: artifacts, liveness: forActivity(windows, 'trainer') }));
        return { metrics, saved, restarts };
      } catch (err) {
        if (!isTrainerGone(err) || restarts >= 20) throw err;
        // The trainer died: a new one loads the last checkpoint, so this step is applied exactly once.
        log.warn('trainer is gone; re-announcing and reloading the last checkpoint', { step: s, error: String(err) });
        trainerQueue = undefined;
      }
    }
  }

  /**
   * A step whose rollouts leave no trainable token (all stale, all truncated and
   * masked...) is not sent to the trainer: it is recorded with the builder's
   * cause as an error, the policy stays where it is, and the run goes on.
   */
  async function buildBatchOrSkip(s: number, rollouts: RolloutSummary[] | undefined, summaries: ArtifactRef | undefined) {
    try {
      const built = await untilStore(() => light.buildBatch({
        runId, step: s, trainerPolicyVersion: policyVersion, orchestrator: orch, modelPath: config.model.path, artifacts,
        ...(summaries ? { summaries } : { trajectories: rollouts }),
      }));
      return { built, emptyBatch: undefined };
    } catch (err) {
      if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'EmptyBatch')) throw err;
      log.warn('nothing to train on at this step; recorded as an error, the run goes on', { step: s, cause: err.cause.message });
      return { built: undefined, emptyBatch: err.cause.message };
    }
  }

  async function startRollouts(s: number): Promise<PendingRollouts> {
    phase = s === step ? 'sampling' : phase;
    const sampled = await light.sampleTasks({
      runId, step: s, seed, batchSize: orch.batch_size, taskSetDir,
      envs: config.env.map((e) => ({ id: e.id, dataset: e.dataset, weight: e.weight })),
    });
    const tasks = sampled.tasks;
    taskSetDir = sampled.taskSetDir;
    const childInput: StepRolloutsInput = {
      runId, step: s, policyVersion, modelName: modelFor(policyVersion), adapter, keepFromVersion: keepFrom(), tasks,
      config: { sampling: config.sampling, env: config.env, sandbox: config.sandbox, inference: config.inference, orchestrator: orch, liveness: windows },
      taskSetDir, seed, parentWorkflowId: info.workflowId, ...(artifacts ? { artifacts } : {}),
    };
    rolloutCounts.set(s, { done: 0, total: tasks.length * orch.rollouts_per_example });
    const scope = new CancellationScope();
    const handle = await scope.run(() => startChild(StepRollouts, {
      args: [childInput],
      workflowId: `${runId}-step-${s}-rollouts`,
      taskQueue: info.taskQueue,
    }));
    return { step: s, policyVersion, tasks, handle, scope, startedAt: Date.now() };
  }

  // After a restart of anything, inference may have lost the current adapter: serve it before rolling out.
  if (policyVersion > 0) await syncUntilServed();

  let pending: PendingRollouts | undefined;
  let stepsThisExecution = 0;
  while (step < maxSteps) {
    if (pauseRequested) {
      phase = 'idle';
      publish();
      await condition(() => !pauseRequested || stopRequested);
    }
    if (stopRequested) break;
    publish();
    const t0 = Date.now();

    const current = pending && pending.step === step ? pending : await startRollouts(step);
    pending = undefined;
    prefetchedStep = undefined;
    phase = 'rollouts';
    publish();
    // Inline summaries (histories from before the summaries-by-ref patch) or one artifact ref.
    const childResult: StepRolloutsResult = await current.handle.result();
    const rollouts = Array.isArray(childResult) ? childResult : undefined;
    const summaries = Array.isArray(childResult) ? undefined : childResult.summaries;
    const tRollouts = Date.now();

    phase = 'building-batch';
    const { built, emptyBatch } = await buildBatchOrSkip(step, rollouts, summaries);
    const tBatch = Date.now();

    // Overlap: the next step's rollouts run on the current policy while this step trains.
    stepsThisExecution++;
    const willContinueAsNew = stepsThisExecution >= canEvery || workflowInfo().continueAsNewSuggested;
    if (built && asyncLevel >= 1 && step + 1 < maxSteps && !stopRequested && !pauseRequested && !willContinueAsNew) {
      pending = await startRollouts(step + 1);
      prefetchedStep = step + 1;
    }

    const trainerVersionBefore = policyVersion;
    let trained: Awaited<ReturnType<typeof trainAndSave>> | undefined;
    let synced: { ms: number } | undefined;
    if (built) {
      trained = await trainAndSave(step, built.batch, built.manifest);
      policyVersion = trained.saved.policy_version;
      checkpoint = trained.saved.checkpoint;
      adapter = trained.saved.adapter;
    }
    const tTrain = Date.now();
    if (trained) {
      phase = 'weight-sync';
      publish();
      synced = await syncUntilServed();
    }
    const tSync = Date.now();

    phase = 'metrics';
    const stats = rollouts
      ? { ...rolloutStats(rollouts, trainerVersionBefore), rollouts: rollouts.length }
      : await untilStore(() => light.rolloutStatsOf({ summaries: summaries!, trainerPolicyVersion: trainerVersionBefore, artifacts }));
    const dropped = (built?.summary.dropped ?? {}) as Record<string, number>;
    const record: StepRecord = {
      format: 'ratchet.step/v1',
      run_id: runId,
      step,
      time: new Date(tSync).toISOString(),
      policy_version: policyVersion,
      mean_reward: stats.meanReward,
      reward_std: stats.rewardStd,
      reward_components: stats.components,
      rollouts: stats.rollouts,
      samples: built ? built.summary.samples : 0,
      dropped,
      stop_reasons: stats.stopReasons,
      mean_staleness: stats.meanStaleness,
      completion_tokens: stats.completionTokens,
      prompt_tokens: stats.promptTokens,
      tool_calls: stats.toolCalls,
      tool_calls_by_tool: stats.toolsUsed,
      shell_commands: stats.shellCommands,
      staleness_histogram: stats.stalenessHistogram,
      trainer: trained ? { ...trained.metrics, restarts: trained.restarts } : { skipped: true },
      ...(emptyBatch ? { error: { type: 'EmptyBatch', message: emptyBatch } } : {}),
      timing_ms: {
        step: tSync - t0,
        rollouts: tRollouts - Math.max(current.startedAt, t0),
        rollouts_waited: tRollouts - t0,
        build_batch: tBatch - tRollouts,
        train_and_save: tTrain - tBatch,
        weight_sync: tSync - tTrain,
        weight_sync_activity: synced?.ms ?? 0,
      },
      batch: built ? { batch: built.batch, manifest: built.manifest, summary: built.summary } : undefined,
      checkpoint,
      adapter,
      weight_sync: synced,
    };
    const nextState: RunStateFile = {
      format: 'ratchet.run-state/v1',
      runId,
      configSha256: loaded.configSha256,
      completedStep: step,
      nextStep: step + 1,
      policyVersion,
      checkpoint,
      adapter,
      configRef: loaded.configRef,
      seed,
      lastMeanReward: stats.meanReward,
      ...(artifacts ? { artifacts } : {}),
    };
    lastStep = await untilStore(() => light.recordStep({ record, state: nextState }));
    rolloutCounts.delete(step);
    step++;
    phase = 'idle';
    publish();

    if (willContinueAsNew && step < maxSteps && !stopRequested) {
      await continueAsNew<typeof TrainRun>({ ...input, runId, resume: pickResume(nextState) });
    }
  }

  // A stop request can leave the next step's rollouts running: cancel them, their results are not needed.
  if (pending) {
    pending.scope.cancel();
    try {
      await pending.handle.result();
    } catch (err) {
      if (!isCancellation(err)) log.warn('prefetched rollouts ended with an error after stop', { error: String(err) });
    }
  }

  finalStatus = stopRequested && step < maxSteps ? 'stopped' : 'completed';
  phase = 'idle';
  publish();
  return {
    runId,
    stepsCompleted: step,
    policyVersion,
    configSha256: loaded.configSha256,
    checkpoint,
    lastMeanReward: lastStep?.meanReward,
    stopped: finalStatus === 'stopped' ? 'stopped-by-request' : 'completed',
  };
}
