/**
 * What a finished step leaves behind: its line in metrics.jsonl (StepRecord)
 * and the run-state file a resumed run starts from. Pure: workflow code.
 */
import type { ArtifactRef } from '../artifacts/ref';
import type { StoreSettings } from '../artifacts/settings';
import type { BuildBatchOutput } from '../contracts/activities';
import type { ControlAction, EvalSweepStarted, RunOverrides, RunStateFile, StepLineage, StepRecord } from '../contracts/records';
import type { LoadedConfig } from '../contracts/run';
import type { RolloutStats } from '../contracts/step';
import type { TrainedStep } from './trainerSession';
import { addCost, type Cost } from '../shared/cost';

/** Workflow clock readings across one step (ms since the epoch). */
export interface StepTimes {
  start: number;
  rolloutsStarted: number;
  rollouts: number;
  batch: number;
  train: number;
  sync: number;
}

export interface FinishedStep {
  /** The worker build the step ran on (Worker Versioning), when the worker is versioned. */
  build?: { deployment: string; build_id: string };
  /** Control actions accepted since the previous record; settings changed with `ratchet set` in effect for this step. */
  control?: ControlAction[];
  overrides?: RunOverrides;
  lineage?: StepLineage;
  runId: string;
  step: number;
  /** The version the trainer held before this step (staleness is measured against it). */
  versionBefore: number;
  policyVersion: number;
  /** The step's rollout statistics (rolloutStats of its summaries, wherever they were read) and their count. */
  stats: RolloutStats & { rollouts: number };
  built?: BuildBatchOutput;
  trained?: TrainedStep;
  synced?: { ms: number };
  /** Why the step trained on nothing (EmptyBatch...), recorded on the step. */
  error?: { type: string; message: string };
  checkpoint?: ArtifactRef;
  adapter?: ArtifactRef;
  times: StepTimes;
  /** The run's checkpoint epoch (ResumeState.epoch); recorded only when above 0, after a checkpoint fallback. */
  epoch?: number;
  /** The eval sweep this step's checkpoint gets (the in-run eval cadence), started right after the record. */
  evalSweep?: EvalSweepStarted;
  /** The policy version the step's rollouts were started on. */
  samplingPolicyVersion?: number;
  /** The rounds of online difficulty filtering, when it is on. */
  refill?: StepRecord['refill'];
  /** The pass-rate pool after the step, when pools are on. */
  taskPool?: StepRecord['task_pool'];
  /** The cost ledger: TrainRun's history events over the step, and the run's cost before it (absent: nothing recorded). */
  temporalEvents?: number;
  /** StepRollouts' and its shards' history events (StepRolloutsResult.events). */
  temporalChildEvents?: number;
  runCostBefore?: Cost;
}

/** What the step cost (COST_KEYS): its rollouts' sandboxes and tokens, the trainer's seconds, TrainRun's events. */
export function stepCost(f: Pick<FinishedStep, 'stats' | 'trained' | 'built' | 'temporalEvents' | 'temporalChildEvents'>): Cost {
  const s = f.stats.sandbox;
  const m = f.trained?.metrics;
  const num = (x: unknown) => (typeof x === 'number' && Number.isFinite(x) && x > 0 ? x : 0);
  return addCost(undefined, {
    sandbox_containers: s?.containers ?? 0,
    sandbox_container_s: s?.container_s ?? 0,
    sandbox_cpu_s: s?.cpu_s ?? 0,
    trainer_cpu_s: num(m?.cpu_s),
    trainer_gpu_s: num(m?.gpu_s),
    tokens_generated: f.stats.completionTokens,
    // Only a step the trainer applied trained anything (a skipped or faulted step trained no token).
    tokens_trained: f.trained ? num(f.built?.summary.trainable_tokens) : 0,
    temporal_events: Math.max(0, f.temporalEvents ?? 0),
    temporal_child_events: Math.max(0, f.temporalChildEvents ?? 0),
  });
}

export function stepRecord(f: FinishedStep): StepRecord {
  const stats = f.stats;
  const t = f.times;
  return {
    format: 'ratchet.step/v1',
    run_id: f.runId,
    step: f.step,
    time: new Date(t.sync).toISOString(),
    policy_version: f.policyVersion,
    mean_reward: stats.meanReward,
    reward_std: stats.rewardStd,
    reward_components: stats.components,
    rollouts: stats.rollouts,
    samples: f.built ? f.built.summary.samples : 0,
    dropped: (f.built?.summary.dropped ?? {}) as Record<string, number>,
    stop_reasons: stats.stopReasons,
    mean_staleness: stats.meanStaleness,
    completion_tokens: stats.completionTokens,
    prompt_tokens: stats.promptTokens,
    tool_calls: stats.toolCalls,
    tool_calls_by_tool: stats.toolsUsed,
    shell_commands: stats.shellCommands,
    staleness_histogram: stats.stalenessHistogram,
    ...(stats.groups !== undefined ? { groups: stats.groups } : {}),
    ...(stats.informativeGroups !== undefined ? { informative_groups: stats.informativeGroups } : {}),
    ...(f.samplingPolicyVersion !== undefined ? { sampling_policy_version: f.samplingPolicyVersion } : {}),
    ...(f.refill ? { refill: f.refill } : {}),
    ...(f.taskPool ? { task_pool: f.taskPool } : {}),
    trainer: f.trained ? { ...f.trained.metrics, restarts: f.trained.restarts } : { skipped: true },
    ...(f.error ? { error: f.error } : {}),
    timing_ms: {
      step: t.sync - t.start,
      rollouts: t.rollouts - Math.max(t.rolloutsStarted, t.start),
      rollouts_waited: t.rollouts - t.start,
      build_batch: t.batch - t.rollouts,
      train_and_save: t.train - t.batch,
      weight_sync: t.sync - t.train,
      weight_sync_activity: f.synced?.ms ?? 0,
    },
    batch: f.built ? { batch: f.built.batch, manifest: f.built.manifest, summary: f.built.summary } : undefined,
    checkpoint: f.checkpoint,
    adapter: f.adapter,
    weight_sync: f.synced,
    ...(f.build ? { build: f.build } : {}),
    ...(f.control ? { control: f.control } : {}),
    ...(f.overrides ? { overrides: f.overrides } : {}),
    ...(f.lineage ? { lineage: f.lineage } : {}),
    ...(f.epoch ? { epoch: f.epoch } : {}),
    ...(f.runCostBefore ? costFields(f) : {}),
    ...(f.evalSweep ? { eval_sweep: f.evalSweep } : {}),
  };
}

function costFields(f: FinishedStep): { cost: Cost; run_cost: Cost } {
  const cost = stepCost(f);
  return { cost, run_cost: addCost(f.runCostBefore, cost) };
}

/** The run-state file after `record`: the step is complete, the next one starts from here. */
export function runStateAfter(record: StepRecord, loaded: LoadedConfig, seed: number, artifacts?: StoreSettings, epoch?: number): RunStateFile {
  return {
    format: 'ratchet.run-state/v1',
    runId: record.run_id,
    configSha256: loaded.configSha256,
    completedStep: record.step,
    nextStep: record.step + 1,
    policyVersion: record.policy_version,
    checkpoint: record.checkpoint,
    adapter: record.adapter,
    configRef: loaded.configRef,
    seed,
    lastMeanReward: record.mean_reward,
    ...(artifacts ? { artifacts } : {}),
    ...(record.overrides ? { overrides: record.overrides } : {}),
    ...(epoch ? { epoch } : {}),
    ...(record.run_cost ? { cost: record.run_cost } : {}),
    ...(record.task_pool ? { taskPool: record.task_pool.pool } : {}),
  };
}
