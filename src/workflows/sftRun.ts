/**
 * SftRun: supervised fine-tuning as a durable workflow, the warm start before RL.
 * Each step: build a batch of trajectories (seeded from seed + step, from the run's
 * frozen [sft] data) → trainer step with loss.kind = "sft" (the negative
 * log-likelihood of exactly the policy's tokens: the RL loss mask) → save → weight
 * sync → step record. It is TrainRun without rollouts, and it reuses TrainRun's
 * parts unchanged: the leased trainer session and its exactly-once step ledger
 * (trainerSession.ts), checkpoints, weight sync that waits out a down server
 * (weightSync.ts), status/progress/pause/resume/stop (runControl.ts), the step
 * record and run state (stepRecord.ts, so `ratchet status` and `ratchet report`
 * read it like any run), continue-as-new with only ResumeState.
 *
 * Its adapter is served by vLLM as `<run>-v<N>` after every step, and its last
 * checkpoint's adapter is what a TrainRun starts from (docs/training.md, "SFT").
 *
 * A new workflow type: no history of it predates this code, so it needs no patch.
 */
import { ApplicationFailure, CancellationScope, ContinueAsNew, condition, continueAsNew, log, patched, upsertMemo, workflowInfo } from '@temporalio/workflow';
import type { ArtifactRef } from '../artifacts/ref';
import { storeSettings } from '../config/storeSettings';
import type { RunConfig } from '../config/schema';
import type { BuildBatchOutput } from '../contracts/activities';
import { pickResume, type ResumeState, type TrainRunInput, type TrainRunResult } from '../contracts/run';
import type { RolloutStats } from '../contracts/step';
import { forActivity, livenessOf } from '../shared/liveness';
import { CONTINUE_AS_NEW, syncUntilServed } from './weightSync';
import { PATCHES } from './patches';
import { light } from './proxies';
import { openRunPrologue } from './runPrologue';
import { runStateAfter, stepRecord } from './stepRecord';
import { TrainerSession, isStepFault, type TrainedStep } from './trainerSession';

/** An SFT step has no rollouts: its record's rollout figures are zero. */
const NO_ROLLOUTS: RolloutStats & { rollouts: number } = {
  meanReward: 0, rewardStd: 0, components: {}, stopReasons: {}, completionTokens: 0, toolCalls: 0, promptTokens: 0,
  meanStaleness: 0, stalenessHistogram: {}, toolsUsed: {}, shellCommands: {}, rollouts: 0,
};

/** The run config as the trainer sees it in an SftRun: the same, with the SFT loss. */
export function sftConfig(config: RunConfig): RunConfig {
  return { ...config, trainer: { ...config.trainer, loss: { ...config.trainer.loss, kind: 'sft' } } };
}

export async function SftRun(input: TrainRunInput): Promise<TrainRunResult> {
  const { run, patient, loaded, resume } = await openRunPrologue(input);
  const runId = run.runId;
  const sft = loaded.config.sft;
  if (!sft) {
    throw ApplicationFailure.nonRetryable(`${input.configPath}: an SftRun needs an [sft] section naming its trajectories, e.g. [sft] data = ["demos.jsonl"]. ` +
      'Fix: add it (docs/training.md, "Supervised fine-tuning")', 'InvalidConfig');
  }
  const config = sftConfig(loaded.config);
  const artifacts = storeSettings(config.artifacts);
  if (artifacts) upsertMemo({ artifacts });
  const orch = config.orchestrator;
  run.maxSteps = orch.max_steps;
  run.step = resume?.nextStep ?? 0;
  run.policyVersion = resume?.policyVersion ?? 0;
  let checkpoint: ArtifactRef | undefined = resume?.checkpoint;
  let adapter: ArtifactRef | undefined = resume?.adapter;
  const seed = resume?.seed ?? orch.seed;
  const windows = livenessOf(config);
  const canEvery = input.continueAsNewEvery ?? orch.continue_as_new_every;
  // [model] init_from: an SftRun may go on from another run's adapter too (its version 0, served before step 0).
  const init = config.model.init && patched(PATCHES.initFrom) ? config.model.init : undefined;
  const trainer = new TrainerSession(run, config, input.trainerTimeouts, windows, input.resume?.trainerQueue, artifacts, init);
  const serveCurrent = () => syncUntilServed(run, () => ({
    runId, baseUrls: config.inference.base_urls, policyVersion: run.policyVersion, adapter: adapter ?? (run.policyVersion === 0 ? init?.adapter : undefined),
    keepFromVersion: Math.max(1, run.policyVersion - 1), artifacts, liveness: forActivity(windows, 'weight_sync'),
  }), input.inferenceWaitsPerExecution, config.inference.sync_task_queues ?? []);
  if (input.resume?.paused) run.pauseRequested = true;

  // The data, checked against the model's template and frozen in the store (later executions get the frozen copy).
  run.phase = 'building-batch';
  const data = await patient.prepareSftData({
    runId, data: [...sft.data], ...(sft.min_reward !== undefined ? { minReward: sft.min_reward } : {}), modelPath: config.model.path, artifacts,
  });
  log.info('sft data ready', { trajectories: data.trajectories, rejected: data.rejected });
  run.started = true;
  run.publish();

  const continueFrom = (state: ResumeState) => continueAsNew<typeof SftRun>({
    ...input, runId,
    resume: { ...pickResume(state), ...(run.pauseRequested ? { paused: true } : {}), ...(trainer.heldQueue ? { trainerQueue: trainer.heldQueue } : {}) },
  });

  async function releaseRun(): Promise<void> {
    await trainer.release();
    try {
      await light.unloadRunAdapters({ runId, baseUrls: config.inference.base_urls });
    } catch (err) {
      log.warn('could not unload the run\'s adapters', { error: String(err) });
    }
  }

  async function runSteps(): Promise<TrainRunResult> {
    if ((run.policyVersion > 0 || init) && (await serveCurrent()) === CONTINUE_AS_NEW) {
      await continueFrom(resume ?? { nextStep: run.step, policyVersion: run.policyVersion, configRef: loaded.configRef, seed, ...(artifacts ? { artifacts } : {}) });
    }
    let stepsThisExecution = 0;
    while (run.step < run.maxSteps) {
      if (run.pauseRequested) {
        run.phase = 'idle';
        run.publish();
        await condition(() => !run.pauseRequested || run.stopRequested);
      }
      if (run.stopRequested) break;
      const step = run.step;
      const t0 = Date.now();
      run.phase = 'building-batch';
      run.publish();
      const built: BuildBatchOutput = await patient.buildSftBatch({
        runId, step, seed, batchSize: sft!.batch_size, data: data.data, modelPath: config.model.path, seqLen: orch.seq_len, artifacts,
      });
      const tBatch = Date.now();

      const versionBefore = run.policyVersion;
      let trained: TrainedStep | undefined;
      let error: { type: string; message: string } | undefined;
      const outcome = await trainer.trainAndSave(step, built.batch, built.manifest, checkpoint);
      if (isStepFault(outcome)) {
        error = outcome.fault;
      } else {
        trained = outcome;
        run.policyVersion = trained.saved.policy_version;
        checkpoint = trained.saved.checkpoint;
        adapter = trained.saved.adapter ?? undefined;
      }
      const tTrain = Date.now();
      stepsThisExecution++;
      const willContinueAsNew = stepsThisExecution >= canEvery || workflowInfo().continueAsNewSuggested;
      let synced: { ms: number } | undefined;
      let syncDeferred = false;
      if (trained) {
        run.phase = 'weight-sync';
        run.publish();
        let served = await serveCurrent();
        while (served === CONTINUE_AS_NEW && (step + 1 >= run.maxSteps || run.stopRequested)) served = await serveCurrent();
        if (served === CONTINUE_AS_NEW) syncDeferred = true;
        else synced = served;
      }
      const tSync = Date.now();

      run.phase = 'metrics';
      const record = stepRecord({
        runId, step, versionBefore, policyVersion: run.policyVersion, stats: NO_ROLLOUTS, built, trained, synced, error, checkpoint, adapter,
        times: { start: t0, rolloutsStarted: t0, rollouts: t0, batch: tBatch, train: tTrain, sync: tSync },
      });
      const nextState = runStateAfter(record, loaded, seed, artifacts);
      run.lastStep = await patient.recordStep({ record, state: nextState });
      run.step++;
      run.phase = 'idle';
      run.publish();
      if ((willContinueAsNew || syncDeferred) && run.step < run.maxSteps && !run.stopRequested) await continueFrom(nextState);
    }
    run.finalStatus = run.stopRequested && run.step < run.maxSteps ? 'stopped' : 'completed';
    run.phase = 'idle';
    run.publish();
    return {
      runId, stepsCompleted: run.step, policyVersion: run.policyVersion, configSha256: loaded.configSha256, checkpoint,
      lastMeanReward: run.lastStep?.meanReward, stopped: run.finalStatus === 'stopped' ? 'stopped-by-request' : 'completed',
    };
  }

  try {
    const result = await runSteps();
    await releaseRun();
    return result;
  } catch (err) {
    if (!(err instanceof ContinueAsNew)) await CancellationScope.nonCancellable(releaseRun);
    throw err;
  }
}
