/**
 * TrainRun: the durable RL loop of docs/architecture.md. Each step: sample → rollouts
 * (StepRollouts child) → build batch → trainer step → save → weight sync →
 * metrics. Steps overlap by `async_level`: the next step's rollouts start before
 * this step trains. Continue-as-new every K steps (or when the server suggests
 * it) carries only ResumeState; everything large lives in the artifact store.
 *
 * The parts live beside it: runControl.ts (status, progress, pause/resume/stop),
 * trainerSession.ts (the run's leased trainer), weightSync.ts (weight sync
 * that waits out a down server), stepRecord.ts (what a finished step writes),
 * proxies.ts (activity timeouts and retries), patches.ts (behaviour changes
 * behind patched(), so runs started on older code replay).
 *
 * However the run ends (completed, stopped, failed, cancelled), it releases its
 * trainer and unloads its adapters from inference; a terminated run's trainer
 * comes free when its lease expires.
 */
import {
  ActivityFailure,
  ApplicationFailure,
  CancellationScope,
  ChildWorkflowHandle,
  ContinueAsNew,
  condition,
  continueAsNew,
  deprecatePatch,
  isCancellation,
  log,
  makeContinueAsNewFunc,
  patched,
  upsertMemo,
  startChild,
  workflowInfo,
} from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import { storeSettings } from '../config/storeSettings';
import { adapterName } from '../shared/adapters';
import { syncQuorum } from '../shared/replicas';
import { forActivity, livenessOf } from '../shared/liveness';
import type { RunConfig } from '../config/schema';
import { CONTINUE_AS_NEW, syncUntilServed } from './weightSync';
import { handOffInferenceWait } from './inferenceWait';

/** The first pause of the last step's InferenceWait child (it doubles to INFERENCE_WAIT_CAP_S). */
const LAST_STEP_WAIT_START_S = 5;
import { DEPRECATED_PATCHES, PATCHES } from './patches';
import { light } from './proxies';
import { mergeOverrides } from './runControl';
import { openRunPrologue } from './runPrologue';
import { StepRollouts } from './stepRollouts';
import { runStateAfter, stepRecord } from './stepRecord';
import { stepLineage } from './lineage';
import { EVAL_WAIT_AT_END, evalDue, evalSettingsOf, evalVersionsToCarry, keepFromWithEvals, plannedSweep, startEvalSweep, sweepInput } from './evalCadence';
import { CheckpointLoadFailed, TrainerSession, isStepFault, type StepFault, type TrainedStep } from './trainerSession';
import type { RunStateFile, TaskFileDigest } from '../contracts/records';
import { pickResume, type ResumeState, type TrainRunInput, type TrainRunResult } from '../contracts/run';
import type { StepRolloutsInput, StepRolloutsResult } from '../contracts/step';
import { trainingPriority } from '../shared/fairness';
import { addCost, budgetsOf, budgetsOfSection, exhaustedBudget, hasBudgets, zeroCost } from '../shared/cost';

/** Cancels rollouts started ahead whose results are not needed (stop, or continue-as-new mid-wait). */
async function cancelPending(pending: PendingRollouts): Promise<void> {
  pending.scope.cancel();
  try {
    await pending.handle.result();
  } catch (err) {
    if (!isCancellation(err)) log.warn('prefetched rollouts ended with an error after cancel', { error: String(err) });
  }
}

interface PendingRollouts {
  step: number;
  policyVersion: number;
  /** Tasks in the step (their rows are in the step manifest). */
  tasks: number;
  /** The step manifest (tasks by reference). */
  manifest: ArtifactRef;
  /** Each env's task file as the sampling activity read it (its answer: absent from older workers). */
  taskFiles?: TaskFileDigest[];
  handle: ChildWorkflowHandle<typeof StepRollouts>;
  scope: CancellationScope;
  startedAt: number;
}

/** The worker build this execution runs on (pinned), or undefined on an unversioned worker. */
function buildOf(): { deployment: string; build_id: string } | undefined {
  const v = workflowInfo().currentDeploymentVersion;
  return v ? { deployment: v.deploymentName, build_id: v.buildId } : undefined;
}

/** A newer build is current for this deployment: move to it at this step boundary (continue-as-new). */
function upgradeWaiting(): boolean {
  return workflowInfo().targetWorkerDeploymentVersionChanged && patched(PATCHES.upgradeOnContinueAsNew);
}

export async function TrainRun(input: TrainRunInput): Promise<TrainRunResult> {
  const info = workflowInfo();
  // ---- open the run: config (validated, stored, hashed) and where to start ----
  const { run, patient, loaded, resume } = await openRunPrologue(input);
  const runId = run.runId;
  const config: RunConfig = loaded.config;
  const artifacts = storeSettings(config.artifacts);
  // Where the run lives, for `ratchet eval` on any host (no credentials: settings only).
  // Runs on the default store record nothing, so their histories are unchanged.
  if (artifacts) {
    deprecatePatch(DEPRECATED_PATCHES.artifactsMemo);
    upsertMemo({ artifacts });
  }
  const orch = config.orchestrator;
  run.maxSteps = orch.max_steps;
  run.step = resume?.nextStep ?? 0;
  run.policyVersion = resume?.policyVersion ?? 0;
  let checkpoint: ArtifactRef | undefined = resume?.checkpoint;
  let adapter: ArtifactRef | undefined = resume?.adapter;
  const seed = resume?.seed ?? orch.seed;
  // Pass-rate pools: checked only when on, so runs without them make no new command.
  const pools = orch.pass_rate_pool?.enabled === true && patched(PATCHES.passRatePools);
  /** The pool after the last step whose rollouts it counts; the next steps' sampling reads it. */
  let taskPool: ArtifactRef | undefined = pools ? resume?.taskPool : undefined;
  /** The checkpoint epoch: one more after each checkpoint fallback (src/records/fallback.ts). */
  const epoch = resume?.epoch ?? 0;
  if (resume?.lastMeanReward !== undefined) {
    run.lastStep = { step: run.step - 1, meanReward: resume.lastMeanReward, components: {}, rollouts: 0, dropped: 0, policyVersion: run.policyVersion };
  }
  // `ratchet set` changes these at a step boundary (runControl.ts); a resumed run keeps them.
  run.overrides = { ...(resume?.overrides ?? {}) };
  // The cost ledger: the run's cost so far (docs/operations.md); budgets count from it.
  run.cost = addCost(undefined, resume?.cost ?? zeroCost());
  /** [budget] with `ratchet set --budget` changes over it, pending ones included (a raise lifts the wait at once). */
  const budgetsNow = () => budgetsOf(budgetsOfSection(config.budget), { ...(run.overrides.budget ?? {}), ...(run.pendingOverrides.budget ?? {}) });
  const asyncLevel = () => run.overrides.async_level ?? orch.async_level;
  /** The in-run eval cadence in effect ([eval] every_steps, or a `ratchet set --eval-every`; 0: off). */
  const evalEvery = () => run.overrides.eval_every_steps ?? evalSettingsOf(config).every_steps;
  /** [orchestrator] as in effect now: the batch builder's staleness filter and the step children read async_level from it. */
  const orchNow = () => (run.overrides.async_level === undefined ? orch : { ...orch, async_level: run.overrides.async_level });
  const windows = livenessOf(config);
  const canEvery = input.continueAsNewEvery ?? orch.continue_as_new_every;
  let taskSetDir = '';
  // A warm start ([model] init_from, resolved when the run opened): version 0 is the origin run's adapter,
  // served as <run>/policy-v0 and kept like any version while rollouts may use it.
  const init = config.model.init && patched(PATCHES.initFrom) ? config.model.init : undefined;
  // Versions an in-run eval sweep still evaluates stay loaded (evalCadence.ts).
  const keepFrom = () => keepFromWithEvals(Math.max(init ? 0 : 1, run.policyVersion - asyncLevel() - 1), run);
  // Full fine-tuning: the replicas serve the run's newest weights under the served name itself (no adapters).
  const full = config.trainer.mode === 'full' && patched(PATCHES.fullWeightSync);
  const modelFor = (v: number) => (full || (v === 0 && !init) ? config.inference.served_model : adapterName(runId, v));
  // A validator's refusal is not in history: replay-safe. ratchet check refuses [eval] every_steps for the same reason.
  if (full) run.evalSweepsRefused = 'a full fine-tuning run serves one set of weights a replica and no adapter, so an eval sweep could not serve a checkpoint beside training. Fix: evaluate its checkpoints on a vLLM of their own (docs/gpu.md, "Full fine-tuning")';
  /** The adapter serving the current version: the run's own, or at version 0 the one it started from. */
  const servedAdapter = () => adapter ?? (run.policyVersion === 0 ? init?.adapter : undefined);
  /** A full run's current weights: the checkpoint of run.policyVersion (none at version 0: the base model). */
  const servedCheckpoint = () => (run.policyVersion > 0 && checkpoint ? { checkpoint } : {});
  const trainer = new TrainerSession(run, config, input.trainerTimeouts, windows, input.resume?.trainerQueue, artifacts, init);
  const syncRequest = () => ({
    runId, baseUrls: config.inference.base_urls, policyVersion: run.policyVersion, adapter: servedAdapter(), keepFromVersion: keepFrom(),
    artifacts, liveness: forActivity(windows, 'weight_sync'), quorum: syncQuorum(config.inference),
    ...(full ? { full: true, ...servedCheckpoint() } : {}),
  });
  const serveCurrent = () => syncUntilServed(run, syncRequest, input.inferenceWaitsPerExecution, config.inference.sync_task_queues ?? []);
  let inferenceHandoffs = 0;
  if (input.resume?.paused) {
    deprecatePatch(DEPRECATED_PATCHES.pauseCarried);
    run.pauseRequested = true;
  }
  run.carriedEvalVersions = input.resume?.evalVersions ?? [];
  run.started = true;
  run.publish();

  /**
   * Continue as new from `state`: the pause and the leased trainer go along; nothing large does.
   * The next execution starts on the deployment's current build (docs/upgrades.md).
   */
  const continueFrom = (state: ResumeState) => (patched(PATCHES.upgradeOnContinueAsNew)
    ? makeContinueAsNewFunc<typeof TrainRun>({ initialVersioningBehavior: 'AUTO_UPGRADE' })
    : continueAsNew<typeof TrainRun>)({
    ...input, runId,
    resume: {
      ...pickResume(state),
      ...(run.pauseRequested ? { paused: true } : {}),
      ...(trainer.heldQueue ? { trainerQueue: trainer.heldQueue } : {}),
      ...(evalVersionsToCarry(run).length ? { evalVersions: evalVersionsToCarry(run) } : {}),
      // Changes accepted but not yet in effect take effect at the next execution's first step.
      ...(Object.keys({ ...run.overrides, ...run.pendingOverrides }).length ? { overrides: mergeOverrides(run.overrides, run.pendingOverrides) } : {}),
      ...(run.cost ? { cost: run.cost } : {}),
    },
  });

  /** However the run ended: the trainer goes back to the pool and its adapters leave inference. */
  async function releaseRun(waitForEvals = false): Promise<void> {
    await trainer.release();
    // A run that ended well: its in-run eval sweeps still running use its adapters; unload them once they end (bounded).
    if (waitForEvals && run.evalsRunning.size && !(await condition(() => run.evalsRunning.size === 0, EVAL_WAIT_AT_END))) {
      log.warn('in-run eval sweeps still running; the run\'s adapters are unloaded anyway', { sweeps: [...run.evalsRunning.keys()] });
    }
    try {
      await light.unloadRunAdapters({ runId, baseUrls: config.inference.base_urls });
    } catch (err) {
      log.warn('could not unload the run\'s adapters', { error: String(err) });
    }
  }

  /**
   * A step whose rollouts leave no trainable token (all stale, all truncated and
   * masked...) is not sent to the trainer: it is recorded with the builder's
   * cause as an error, the policy stays where it is, and the run goes on.
   */
  async function buildBatchOrSkip(s: number, summaries: ArtifactRef) {
    try {
      const built = await patient.buildBatch({
        runId, step: s, trainerPolicyVersion: run.policyVersion, orchestrator: orchNow(), modelPath: config.model.path, artifacts,
        // An input field only (no new command): replays of older histories are unaffected.
        loss: { kind: config.trainer.loss.kind, normalization: config.trainer.loss.normalization },
        summaries,
      });
      return { built, emptyBatch: undefined };
    } catch (err) {
      if (!(err instanceof ActivityFailure && err.cause instanceof ApplicationFailure && err.cause.type === 'EmptyBatch')) throw err;
      log.warn('nothing to train on at this step; recorded as an error, the run goes on', { step: s, cause: err.cause.message });
      return { built: undefined, emptyBatch: err.cause.message };
    }
  }

  /** `refill`: a refill round of difficulty filtering, its own tasks (batchSize of them), keys and child. */
  async function startRollouts(s: number, refill?: { round: number; batchSize: number }): Promise<PendingRollouts> {
    run.phase = s === run.step ? 'sampling' : run.phase;
    const batchSize = refill?.batchSize ?? orch.batch_size;
    /** What the task sampling activity gets besides the step: the refill round, the pass-rate pool. */
    const sampling = {
      ...(refill ? { round: refill.round } : {}),
      // After a checkpoint fallback the retrained steps' rollouts get keys of their own (group ids carry the epoch).
      ...(epoch && patched(PATCHES.epochGroupIds) ? { epoch } : {}),
      ...(taskPool ? { taskPool, poolFloor: orch.pass_rate_pool.floor, ...(artifacts ? { artifacts } : {}) } : {}),
    };
    const policyVersion = run.policyVersion;
    const common = {
      runId, step: s, policyVersion, modelName: modelFor(policyVersion), adapter: servedAdapter(), keepFromVersion: keepFrom(),
      ...(full ? { full: servedCheckpoint() } : {}),
      config: { sampling: config.sampling, env: config.env, sandbox: config.sandbox, inference: config.inference, orchestrator: orchNow(), liveness: windows },
      seed, parentWorkflowId: info.workflowId, ...(artifacts ? { artifacts } : {}), ...(refill ? { round: refill.round } : {}),
      ...(input.outageWaits ? { outageWaits: input.outageWaits } : {}),
      ...(input.rolloutWorkersWatchS !== undefined ? { rolloutWorkersWatchS: input.rolloutWorkersWatchS } : {}),
      ...(input.rolloutHeartbeat !== undefined ? { rolloutHeartbeat: input.rolloutHeartbeat } : {}),
      ...(input.shardEventsBeforeContinue !== undefined ? { shardEventsBeforeContinue: input.shardEventsBeforeContinue } : {}),
    };
    // Tasks by reference: the step manifest, written once, and rollouts in chunks (issue 24). The inline
    // sampleTasks path (rollouts_per_chunk = 0) is gone (docs/upgrades.md, "The per-rollout fan-out").
    deprecatePatch(DEPRECATED_PATCHES.stepManifest);
    const written = await patient.writeStepManifest({
      runId, step: s, seed, batchSize, taskSetDir, policyVersion, modelName: modelFor(policyVersion), ...sampling,
      rolloutsPerExample: orch.rollouts_per_example, sampling: config.sampling,
      envs: config.env.map((e) => ({ id: e.id, dataset: e.dataset, weight: e.weight, args: e.args, rubric: e.rubric })),
      sandbox: config.sandbox, inferenceBaseUrls: config.inference.base_urls, liveness: forActivity(windows, 'rollout'),
      ...(artifacts ? { artifacts } : {}),
      // An activity's input is not part of replay's check (only its type and id), so older histories replay.
      maxConcurrentRollouts: orch.max_concurrent_rollouts,
      // A full run's rollouts check that their replica serves this checkpoint (a restarted one serves the base
      // model). An activity input only, behind the full-weight patch: histories from before it replay.
      ...(full ? { fullWeights: policyVersion > 0 && checkpoint ? { checkpoint: checkpoint.uri } : {} } : {}),
    });
    taskSetDir = written.taskSetDir;
    const tasks = written.tasks;
    const childInput: StepRolloutsInput = { ...common, tasks: [], manifest: written.manifest, taskCount: tasks, taskSetDir };
    run.rolloutCounts.set(s, { done: 0, total: tasks * orch.rollouts_per_example });
    const scope = new CancellationScope();
    const handle = await scope.run(() => startChild(StepRollouts, {
      args: [childInput],
      workflowId: `${runId}-step-${s}-rollouts${refill ? `-r${refill.round}` : ''}`,
      taskQueue: info.taskQueue,
      priority: trainingPriority(runId, orch.fairness_weight),
    }));
    return { step: s, policyVersion, tasks, manifest: written.manifest, ...(written.files ? { taskFiles: written.files } : {}), handle, scope, startedAt: Date.now() };
  }

  /**
   * Online difficulty filtering: while the step has fewer than batch_size informative groups (rewards not
   * all alike), and refill rounds remain, roll out that many more tasks. Returns every round's summaries
   * (the step's statistics), the informative groups' (its batch), and the rounds for the step record.
   */
  async function refillUntilInformative(s: number, first: PendingRollouts, firstSummaries: ArtifactRef) {
    const target = orch.batch_size;
    const refs = [firstSummaries];
    const versions = [first.policyVersion];
    let childEvents = 0;
    const filter = () => patient.filterGroups({ runId, step: s, rounds: refs, limitEnded: orch.limit_ended, ...(artifacts ? { artifacts } : {}) });
    let f = await filter();
    for (let round = 1; f.informative < target && round <= orch.difficulty_filter.max_refill_rounds && !run.stopRequested; round++) {
      log.info('too few informative groups: sampling more', { step: s, round, informative: f.informative, target });
      const more = await startRollouts(s, { round, batchSize: target - f.informative });
      run.phase = 'rollouts';
      run.publish();
      const res: StepRolloutsResult = await more.handle.result();
      refs.push(res.summaries);
      versions.push(more.policyVersion);
      childEvents += res.events ?? 0;
      f = await filter();
    }
    const refill = { target, rounds: f.rounds.map((r, round) => ({ round, groups: r.groups, informative_groups: r.informative, policy_version: versions[round]! })) };
    return { all: f.all, kept: f.kept, refill, childEvents, informative: f.informative };
  }

  /** The steps from where the run stands to its end (or to continue-as-new, which throws). */
  async function runSteps(): Promise<TrainRunResult> {
    // After a restart of anything, inference may have lost the current adapter: serve it before rolling out.
    // A warm start's version 0 is its origin's adapter: served before the first rollout. A full run's version 0
    // is the base model, which a replica may not hold (another run's weights, or this run's after a fallback).
    if ((run.policyVersion > 0 || init || full) && (await serveCurrent()) === CONTINUE_AS_NEW) {
      // A warm start that has not completed a step yet has no resume state: its start is one.
      await continueFrom(resume ?? { nextStep: run.step, policyVersion: run.policyVersion, configRef: loaded.configRef, seed, ...(artifacts ? { artifacts } : {}) });
    }

    let pending: PendingRollouts | undefined;
    let stepsThisExecution = 0;
    while (run.step < run.maxSteps) {
      // A budget reached: the run waits here, between steps, until a `set` raises it (or a stop).
      if (hasBudgets(budgetsNow()) && patched(PATCHES.runBudgets)) {
        const over = exhaustedBudget(run.cost!, budgetsNow());
        if (over) {
          run.budgetExhausted = over;
          run.phase = 'idle';
          run.publish();
          log.warn('budget reached: the run waits for a raise (ratchet set --budget)', { step: run.step, ...over });
          await condition(() => run.stopRequested || !exhaustedBudget(run.cost!, budgetsNow()));
          run.budgetExhausted = undefined;
          run.publish();
        }
      }
      if (run.pauseRequested) {
        run.phase = 'idle';
        run.publish();
        await condition(() => !run.pauseRequested || run.stopRequested);
      }
      if (run.stopRequested) break;
      // The step boundary: settings changed with `ratchet set` take effect for this step on.
      if (run.applyPendingOverrides()) log.info('run settings changed', { step: run.step, overrides: run.overrides });
      run.publish();
      const step = run.step;
      const t0 = Date.now();
      const events0 = workflowInfo().historyLength;

      const current = pending && pending.step === step ? pending : await startRollouts(step);
      // No trainer loaded (the execution's first step, or one lost): it loads while these rollouts run.
      if (!trainer.loadedOrLoading && patched(PATCHES.trainerLoadedDuringRollouts)) trainer.loadAhead(checkpoint);
      pending = undefined;
      run.prefetchedStep = undefined;
      run.phase = 'rollouts';
      run.publish();
      const childResult: StepRolloutsResult = await current.handle.result();
      let summaries = childResult.summaries;
      // Difficulty filtering: the batch is the informative groups of every round; the statistics are over all of them.
      const filtered = orch.difficulty_filter?.enabled && patched(PATCHES.difficultyFilter)
        ? await refillUntilInformative(step, current, summaries) : undefined;
      if (filtered) summaries = filtered.all;
      // Pass-rate pools: this step's rollouts (every round) counted before the next step samples.
      const pool = pools ? await patient.updateTaskPool({
        runId, step, ...(taskPool ? { previous: taskPool } : {}), summaries, passReward: orch.pass_rate_pool.pass_reward, ...(artifacts ? { artifacts } : {}),
      }) : undefined;
      if (pool) taskPool = pool.pool;
      const tRollouts = Date.now();

      run.phase = 'building-batch';
      // No informative group in any round: nothing to build (the builder would only say it had no rollouts).
      const { built, emptyBatch } = filtered?.informative === 0
        ? { built: undefined, emptyBatch: `step ${step} of run ${runId}: no group of its ${filtered.refill.rounds.length} round(s) had rewards that differ, so every advantage is 0 ` +
            'and there is nothing to train on. Fix: raise orchestrator.difficulty_filter.max_refill_rounds, sample easier or harder tasks ' +
            '(orchestrator.pass_rate_pool), or check the rubric' }
        : await buildBatchOrSkip(step, filtered ? filtered.kept : summaries);
      const tBatch = Date.now();

      // Overlap: the next step's rollouts run on the current policy while this step trains.
      stepsThisExecution++;
      const willContinueAsNew = stepsThisExecution >= canEvery || workflowInfo().continueAsNewSuggested;
      if (built && asyncLevel() >= 1 && step + 1 < run.maxSteps && !run.stopRequested && !run.pauseRequested && !willContinueAsNew) {
        pending = await startRollouts(step + 1);
        run.prefetchedStep = step + 1;
      }

      const versionBefore = run.policyVersion;
      const parentCheckpoint = checkpoint;
      let trained: TrainedStep | undefined;
      let synced: { ms: number } | undefined;
      let error = emptyBatch ? { type: 'EmptyBatch', message: emptyBatch } : undefined;
      let syncDeferred = false;
      if (built) {
        let outcome: TrainedStep | StepFault;
        try {
          outcome = await trainer.trainAndSave(step, built.batch, built.manifest, checkpoint, run.overrides.learning_rate);
        } catch (err) {
          if (!(err instanceof CheckpointLoadFailed)) throw err;
          // The newest checkpoint may be corrupt: verified by an activity, which records the fallback if it is.
          const held: RunStateFile = {
            format: 'ratchet.run-state/v1', runId, configSha256: loaded.configSha256, completedStep: step - 1, nextStep: step,
            policyVersion: versionBefore, checkpoint, adapter, configRef: loaded.configRef, seed,
            ...(run.lastStep ? { lastMeanReward: run.lastStep.meanReward } : {}),
            ...(artifacts ? { artifacts } : {}), ...(epoch ? { epoch } : {}),
          };
          const fb = await patient.fallBackToVerifiedCheckpoint({ state: held, error: err.detail, time: new Date().toISOString() });
          if (!fb.fellBack) throw err.failure;
          log.warn('newest checkpoint is corrupt: falling back to the newest that verifies; the steps after it are trained again', {
            bad: err.checkpoint.uri, used: fb.record.used?.checkpoint.uri ?? 'the base model', retrained: fb.record.retrained_steps, epoch: fb.record.epoch,
          });
          // Rollouts started ahead ran on a policy the run no longer holds.
          if (pending) await cancelPending(pending);
          // A fresh execution from the fallback's state: every step from its nextStep runs as a new step.
          return await continueFrom(fb.state);
        }
        if (isStepFault(outcome)) {
          error = outcome.fault;
        } else {
          trained = outcome;
          run.policyVersion = trained.saved.policy_version;
          checkpoint = trained.saved.checkpoint;
          // A full run's trainer saves no adapter (null): none is served, recorded or carried.
          adapter = trained.saved.adapter ?? undefined;
        }
      }
      const tTrain = Date.now();
      if (trained) {
        run.phase = 'weight-sync';
        run.publish();
        let served = await serveCurrent();
        // The last step (or a stopping run) has no next execution to serve it: the rest of the wait goes to an
        // InferenceWait child that continues as new (before 0.8 it looped here, growing this history).
        while (served === CONTINUE_AS_NEW && (step + 1 >= run.maxSteps || run.stopRequested) && patched(PATCHES.lastStepInferenceWaitChild)) {
          await handOffInferenceWait(syncRequest(), config.inference.sync_task_queues ?? [], LAST_STEP_WAIT_START_S, input.outageWaits, inferenceHandoffs++);
          // Served now: one more (idempotent) sync here gives the step record its weight_sync as any step's.
          served = await serveCurrent();
        }
        while (served === CONTINUE_AS_NEW && (step + 1 >= run.maxSteps || run.stopRequested)) served = await serveCurrent();
        // Trained and saved, not yet served: the step is recorded, and the next execution serves first.
        if (served === CONTINUE_AS_NEW) syncDeferred = true;
        else synced = served;
      }
      const tSync = Date.now();

      // The in-run eval cadence: a sweep of the checkpoint this step saved, named in its record, started after it.
      const every = evalEvery();
      const sweep = trained && evalDue(step, every) && patched(PATCHES.evalCadence)
        ? plannedSweep(runId, step, run.policyVersion, every, config, epoch) : undefined;

      run.phase = 'metrics';
      const stats = await patient.rolloutStatsOf({ summaries, trainerPolicyVersion: versionBefore, artifacts, limitEnded: orch.limit_ended });
      const record = stepRecord({
        lineage: stepLineage({
          build: buildOf(), config, configSha256: loaded.configSha256, seed, step, taskSetDir, tasks: current.tasks, stepManifest: current.manifest, versionBefore,
          stalenessHistogram: stats.stalenessHistogram, batch: built, parentCheckpoint, checkpoint, adapter, trained: !!trained,
          learningRate: run.overrides.learning_rate, taskFiles: current.taskFiles, trainerCode: trained?.saved.code, ...(init ? { initFrom: init } : {}),
          sandboxImageDigests: stats.sandboxImageDigests, envModules: stats.envModules,
        }),
        build: buildOf(), control: run.takeControls(), overrides: Object.keys(run.overrides).length ? { ...run.overrides } : undefined,
        runId, step, versionBefore, policyVersion: run.policyVersion, samplingPolicyVersion: current.policyVersion, stats, built, trained, synced, error, checkpoint, adapter,
        times: { start: t0, rolloutsStarted: current.startedAt, rollouts: tRollouts, batch: tBatch, train: tTrain, sync: tSync }, epoch,
        temporalEvents: workflowInfo().historyLength - events0, runCostBefore: run.cost,
        ...(childResult.events !== undefined ? { temporalChildEvents: childResult.events + (filtered?.childEvents ?? 0) } : {}),
        ...(filtered ? { refill: filtered.refill } : {}),
        ...(pool ? { taskPool: pool } : {}),
        ...(sweep ? { evalSweep: sweep } : {}),
      });
      const nextState = runStateAfter(record, loaded, seed, artifacts, epoch);
      run.lastStep = await patient.recordStep({ record, state: nextState });
      if (record.run_cost) run.cost = record.run_cost;
      // After the record: the sweep's plan finds the version's adapter in it. Training does not wait for the sweep.
      if (sweep) await startEvalSweep(run, step, sweep, sweepInput(runId, sweep, config, artifacts, epoch));
      run.rolloutCounts.delete(step);
      run.step++;
      run.phase = 'idle';
      run.publish();

      if ((willContinueAsNew || syncDeferred || upgradeWaiting()) && run.step < run.maxSteps && !run.stopRequested) {
        if (pending) await cancelPending(pending);
        await continueFrom(nextState);
      }
    }

    // A stop request can leave the next step's rollouts running: cancel them, their results are not needed.
    if (pending) await cancelPending(pending);

    run.finalStatus = run.stopRequested && run.step < run.maxSteps ? 'stopped' : 'completed';
    const tailControls = run.takeControls();
    run.phase = 'idle';
    run.publish();
    return {
      runId,
      stepsCompleted: run.step,
      policyVersion: run.policyVersion,
      configSha256: loaded.configSha256,
      checkpoint,
      lastMeanReward: run.lastStep?.meanReward,
      stopped: run.finalStatus === 'stopped' ? 'stopped-by-request' : 'completed',
      ...(tailControls ? { controls: tailControls } : {}),
    };
  }

  try {
    const result = await runSteps();
    deprecatePatch(DEPRECATED_PATCHES.releaseAtEnd);
    await releaseRun(true);
    return result;
  } catch (err) {
    if (!(err instanceof ContinueAsNew)) {
      deprecatePatch(DEPRECATED_PATCHES.releaseAtEnd);
      await CancellationScope.nonCancellable(releaseRun);
    }
    throw err;
  }
}
