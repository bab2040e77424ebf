/**
 * Fake activities for TrainRun tests: same names and payload shapes as the real
 * ones (src/activities, docs/contracts.md), in memory, recording what they saw.
 */
import { mkdtempSync, readFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Context } from '@temporalio/activity';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { createChunkActivity } from '../../src/activities/rolloutChunk';
import { StepManifest } from '../../src/contracts/manifest';
import type { WriteStepManifestInput } from '../../src/contracts';
import { RunConfig } from '../../src/config/schema';
import type { ArtifactRef } from '../../src/artifacts/ref';
import type { RolloutSummary } from '../../src/contracts/trajectory';
import type { BuildBatchInput, RolloutInput } from '../../src/contracts';
import { pickResume, taskIdOf, type LoadedConfig, type ResumeState, type SampledTask, type StepSummary } from '../../src/contracts';
import type { CheckpointFallbackInput, CheckpointFallbackResult, RecordStepInput } from '../../src/contracts';
import type { SyncWeightsInput } from '../../src/contracts';
import type { EvalPlan, EvalSweepInput, EvalVersionSummary, RecordEvalInput } from '../../src/contracts/eval';
import type { BuildSftBatchInput, PrepareSftDataInput } from '../../src/contracts/sft';
import { rolloutStats } from '../../src/rollouts/stats';
import { groupSignal } from '../../src/samples/groupSignal';
import { emptyPool, poolCounts, updatePool, type TaskPool } from '../../src/samples/taskPool';
import type { FilterGroupsInput, FilterGroupsResult, SampleTasksInput, UpdateTaskPoolInput } from '../../src/contracts/activities';
import { createRolloutWorkersActivities } from '../../src/activities/rolloutWorkers';

export const ref = (name: string): ArtifactRef => ({
  uri: `file:///fake/${name}`,
  sha256: Buffer.from(name.padEnd(32, '.')).toString('hex').slice(0, 64).padEnd(64, '0'),
  bytes: name.length,
});

export interface FakeOptions {
  orchestrator?: Record<string, unknown>;
  /** The config's [trainer] section (e.g. mode = "full": trainer.save returns no adapter). */
  trainer?: Record<string, unknown>;
  /** The config's [budget] section (the cost ledger). */
  budget?: Record<string, number>;
  /** Each rollout summary carries this sandbox cost (the cost ledger); absent: none, as before it existed. */
  sandboxCost?: { containers: number; container_s: number; cpu_s: number };
  /** trainer.step reports these seconds (cpu_s, gpu_s) in its metrics. */
  trainerCost?: { cpu_s: number; gpu_s: number };
  rolloutMs?: number;
  trainMs?: number;
  /** trainer.step on these worker ids hangs without heartbeating (a dead trainer). */
  deadTrainers?: string[];
  /** ... from this step on (default 0): a trainer that worked, then died. */
  deadFromStep?: number;
  /** syncWeights fails as InferenceUnavailable this many times first. */
  inferenceDownTimes?: number;
  /** recordStep finds the artifact store unreachable this many times first (StoreUnavailable). */
  storeDownTimes?: number;
  /** trainer.save finds its disk full this many times first (DiskFull), after the step was applied. */
  diskFullTimes?: number;
  /** The first rollout finds its disk full this many times first (DiskFull), saving its trajectory. */
  rolloutDiskFullTimes?: number;
  /** buildBatch finds no trainable token at these steps (EmptyBatch). */
  emptyBatchSteps?: number[];
  /** Existing run state (a resume). */
  resume?: ResumeState;
  /** trainer.step fails once with this typed error at these steps (NonFiniteGradient, StepOutOfMemory, BatchError...). */
  stepFaults?: Record<number, string>;
  /** trainer.step of these steps kills its trainer mid-step: it heartbeats, then the trainer never answers again. */
  killingSteps?: number[];
  /** ... only the first this many trainers (default: every one): a partition or a reboot, not the batch. */
  killingTimes?: number;
  /**
   * trainer.step of these steps fails with a process fault (TrainerFault, as the real trainer reports an untyped
   * error and fences itself), the error class taken in turn for each attempt; past the list the step trains.
   */
  processFaults?: Record<number, string[]>;
  /** storeRolloutSummaries finds the artifact store unreachable this many times first (StoreUnavailable). */
  summariesStoreDownTimes?: number;
  /** The first rollout finds the store unreachable this many times first (StoreUnavailable), saving its trajectory. */
  rolloutStoreDownTimes?: number;
  /**
   * Inference is down from the start: every rollout attempt fails (retryable, as a refused model call)
   * until a syncWeights goes through, and syncWeights fails inferenceDownTimes times first.
   */
  inferenceDownAtStart?: boolean;
  /** Where rolloutWorkersSeen reads the rollout hosts' health records (src/rollouts/hostHealth.ts); absent: none. */
  healthStore?: LocalArtifactStore;
  /** A rollout (in a chunk) fails, as if its worker died, where this answers true for it and the chunk's attempt. */
  chunkFailures?: (input: RolloutInput, attempt: number) => boolean;
  /** A pool of this many trainers (w1..wN), each leased to one run at a time, as the real trainer's lease does. */
  leases?: number;
  /** Runs whose workflow no longer runs: a leased trainer's announce takes a trainer from them (freed_run_id), as the real one asks Temporal. */
  endedRuns?: Set<string>;
  /** The config's [sft] section (for SftRun; data = ["demos.jsonl"], batch_size 4 unless given); absent: none. */
  sft?: Record<string, unknown>;
  /**
   * The checkpoints of these steps are corrupt: trainer.load fails on them with ArtifactError, and
   * fallBackToVerifiedCheckpoint finds them corrupt (as the real one, by their step records).
   */
  corruptCheckpoints?: number[];
  /** The run config's [inference] (base_urls, sync_quorum...). */
  inference?: Record<string, unknown>;
  /**
   * These replicas (base URLs) are down for weight syncs: the fake syncWeights counts the quorum as the
   * real one does (every replica without input.quorum), failing as InferenceUnavailable or naming them behind.
   */
  deadReplicas?: string[];
  /** ... for this many syncs only (default: for good). */
  deadReplicaSyncs?: number;
  /** Inference hosts' own sync queues (inference.sync_task_queues): each a worker; `down` ones answer InferenceUnavailable. */
  hostQueues?: Record<string, 'up' | 'down'>;
  /** [model] init_from, as openRun resolves it: the run starts from run "sft-1"'s step-4 adapter. */
  initFrom?: boolean;
  /** The run config's [eval] (the in-run eval cadence: every_steps, taskset, k). */
  eval?: Record<string, unknown>;
  /** evalRecord takes this long (ms): a slow sweep, which training must not wait for. */
  evalMs?: number;
  /** A rollout's reward (default: (rollout index + step) / 10, so every group is informative). */
  rewardOf?: (input: RolloutInput) => number;
}

/** What openRun stores as config.model.init for FakeOptions.initFrom. */
export const FAKE_INIT = { from: 'sft-1', run_id: 'sft-1', step: 4, policy_version: 5, checkpoint: ref('sft-1-ckpt-step-4'), adapter: ref('sft-1-adapter-step-4') };

export interface Event { t: number; what: string; step?: number; version?: number; worker?: string; rollout?: string; lr?: number }

/** The attempt of the chunk activity running now (1 outside one). */
function chunkAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return 1;
  }
}

export function makeFakes(opts: FakeOptions = {}) {
  const events: Event[] = [];
  // Chunk summaries and step manifests go to a real local store, as on a rollout worker.
  const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-fakes-')));
  const now = () => Date.now();
  const config = RunConfig.parse({
    name: 'fake',
    // rollouts_per_chunk unset (16): the step manifest and chunks, as every shipped config runs.
    orchestrator: { batch_size: 2, rollouts_per_example: 3, max_steps: 3, async_level: 0, max_concurrent_rollouts: 4, ...opts.orchestrator },
    env: [{ id: 'swe-grep' }],
    ...(opts.sft ? { sft: { data: ['demos.jsonl'], batch_size: 4, ...opts.sft } } : {}),
    ...(opts.inference ? { inference: opts.inference } : {}),
    ...(opts.initFrom ? { model: { init_from: 'sft-1', init: FAKE_INIT } } : {}),
    ...(opts.budget ? { budget: opts.budget } : {}),
    ...(opts.eval ? { eval: opts.eval } : {}),
    ...(opts.trainer ? { trainer: opts.trainer } : {}),
  });
  let deadReplicaSyncsLeft = opts.deadReplicaSyncs ?? Infinity;
  const configRef = ref('config');
  const sftPrepares: PrepareSftDataInput[] = [];
  const sftBatches: BuildSftBatchInput[] = [];
  const records: RecordStepInput[] = [];
  const evalPlans: EvalSweepInput[] = [];
  const fallbacks: { input: CheckpointFallbackInput; result: CheckpointFallbackResult }[] = [];
  const ckptStep = (r: ArtifactRef): number => Number(/step-(\d+)/.exec(r.uri)![1]);
  const batches: BuildBatchInput[] = [];
  const loads: { worker: string; checkpoint?: ArtifactRef; lossKind?: string; init?: unknown }[] = [];
  const syncs: SyncWeightsInput[] = [];
  const rolloutInputs: RolloutInput[] = [];
  const releases: { worker: string; runId: string }[] = [];
  const unloads: string[] = [];
  /** worker -> run holding it (leases: true). */
  const leased = new Map<string, string>();
  const applied = new Map<string, number>();
  /** Trainers a killing batch took down: every call to them hangs. */
  const killed = new Set<string>();
  let announces = 0;
  let downLeft = opts.inferenceDownTimes ?? 0;
  let storeDownLeft = opts.storeDownTimes ?? 0;
  let diskFullLeft = opts.diskFullTimes ?? 0;
  let rolloutDiskFullLeft = opts.rolloutDiskFullTimes ?? 0;
  let summariesStoreDownLeft = opts.summariesStoreDownTimes ?? 0;
  let rolloutStoreDownLeft = opts.rolloutStoreDownTimes ?? 0;
  let inferenceOut = opts.inferenceDownAtStart ?? false;
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

  // StepRollouts stores its summaries as one artifact; the fakes keep them in memory by uri.
  const summaryArtifacts = new Map<string, RolloutSummary[]>();
  /** Pass-rate pools by uri, and every task sampling's input. */
  const pools = new Map<string, TaskPool>();
  const sampleInputs: SampleTasksInput[] = [];
  const manifestInputs: WriteStepManifestInput[] = [];
  const summariesOf = (input: BuildBatchInput): RolloutSummary[] => (input.summaries ? summaryArtifacts.get(input.summaries.uri)! : (input.trajectories ?? []) as RolloutSummary[]);

  const main = {
    // The real one: it asks the dev server whether rollout workers run or poll.
    ...createRolloutWorkersActivities(opts.healthStore ? { store: opts.healthStore } : {}),
    async storeRolloutSummaries(input: { runId: string; step: number; part?: number; shard?: number; round?: number; summaries?: RolloutSummary[]; parts?: ArtifactRef[] }): Promise<ArtifactRef> {
      if (summariesStoreDownLeft > 0) {
        summariesStoreDownLeft--;
        events.push({ t: now(), what: 'summaries-store-down', step: input.step });
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable('artifact store s3://b/p is unreachable (fake)', 'StoreUnavailable');
      }
      events.push({ t: now(), what: 'summaries-stored', step: input.step });
      // A chunk's summaries are in the real store (rolloutChunk writes them); the rest in memory.
      const all = input.parts ? input.parts.flatMap((p) => summaryArtifacts.get(p.uri) ?? JSON.parse(readFileSync(fileURLToPath(p.uri), 'utf8')) as RolloutSummary[]) : input.summaries!;
      const r = ref(`summaries-${input.runId}-${input.step}${input.round ? `-r${input.round}` : ''}${input.part === undefined ? '' : `-part-${input.part}`}${input.shard === undefined ? '' : `-shard-${input.shard}`}`);
      summaryArtifacts.set(r.uri, all);
      return r;
    },
    /** As the real updateTaskPool (src/activities/rolloutSummaries.ts), over the summaries and pools in memory. */
    async updateTaskPool(input: UpdateTaskPoolInput) {
      const prev = input.previous ? pools.get(input.previous.uri)! : emptyPool();
      const pool = updatePool(prev, input.step, summaryArtifacts.get(input.summaries.uri)!, input.passReward);
      const r = ref(`task-pool-${input.runId}-${input.step}`);
      pools.set(r.uri, pool);
      return { pool: r, ...poolCounts(pool) };
    },
    /** As the real filterGroups (src/activities/rolloutSummaries.ts), over the summaries in memory. */
    async filterGroups(input: FilterGroupsInput): Promise<FilterGroupsResult> {
      events.push({ t: now(), what: 'filterGroups', step: input.step });
      const all: RolloutSummary[] = [];
      const rounds: FilterGroupsResult['rounds'] = [];
      const informative = new Set<string>();
      for (const r of input.rounds) {
        const xs = summaryArtifacts.get(r.uri)!;
        const signal = groupSignal(xs, input.limitEnded);
        rounds.push({ groups: signal.groups.length, informative: signal.informative.length });
        for (const g of signal.informative) informative.add(g);
        all.push(...xs);
      }
      const n = input.rounds.length;
      const allRef = ref(`filtered-all-${input.runId}-${input.step}-${n}`);
      const keptRef = ref(`filtered-kept-${input.runId}-${input.step}-${n}`);
      summaryArtifacts.set(allRef.uri, all);
      summaryArtifacts.set(keptRef.uri, all.filter((s) => informative.has(s.group_id)));
      return { all: allRef, kept: keptRef, rounds, informative: informative.size };
    },
    async rolloutStatsOf(input: { summaries: ArtifactRef; trainerPolicyVersion: number }) {
      const all = summaryArtifacts.get(input.summaries.uri)!;
      return { ...rolloutStats(all, input.trainerPolicyVersion), rollouts: all.length };
    },
    async openRun(input: { configPath: string; runId: string }): Promise<{ loaded: LoadedConfig; resume?: ResumeState }> {
      events.push({ t: now(), what: 'openRun' });
      // As the real openRun: a run id with a recorded step resumes from its state file.
      const last = records.filter((r) => r.state.runId === input.runId).at(-1);
      return { loaded: { runId: input.runId, config, configRef, configSha256: configRef.sha256 }, resume: opts.resume ?? (last && pickResume(last.state)) };
    },
    async readConfig(_ref: ArtifactRef) {
      return config;
    },
    async writeStepManifest(input: WriteStepManifestInput): Promise<{ taskSetDir: string; manifest: ArtifactRef; tasks: number }> {
      manifestInputs.push(input);
      const { tasks } = await main.sampleTasks(input);
      events.push({ t: now(), what: 'manifest', step: input.step });
      const manifest = StepManifest.parse({
        version: 1, runId: input.runId, step: input.step, policyVersion: input.policyVersion, modelName: input.modelName, taskSetDir: '/fake',
        seed: input.seed, rolloutsPerExample: input.rolloutsPerExample, tasks, sampling: input.sampling,
        envs: input.envs.map((e) => ({ args: e.args, rubric: e.rubric })), sandbox: input.sandbox, inferenceBaseUrls: input.inferenceBaseUrls, liveness: input.liveness,
        ...(input.fullWeights ? { fullWeights: input.fullWeights } : {}),
      });
      const key = `runs/${input.runId}/steps/${input.step}/manifest${input.round ? `-r${input.round}` : ''}.json`;
      return { taskSetDir: '/fake', manifest: await store.putJson(key, manifest), tasks: tasks.length };
    },
    async sampleTasks(input: SampleTasksInput): Promise<{ taskSetDir: string; tasks: SampledTask[] }> {
      sampleInputs.push(input);
      const r = input.round ? `-r${input.round}` : '';
      const tasks = Array.from({ length: input.batchSize }, (_, g) => ({
        envId: 'swe-grep', envIndex: 0, datasetPath: '/fake/train.jsonl', instanceId: `task-${input.step}${r}-${g}`, groupId: `s${input.step}${r}-g${g}`,
      }));
      return { taskSetDir: '/fake', tasks };
    },
    async syncWeights(input: SyncWeightsInput) {
      syncs.push(input);
      events.push({ t: now(), what: 'sync', version: input.policyVersion });
      if (downLeft > 0) {
        downLeft--;
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable('replica down (fake)', 'InferenceUnavailable');
      }
      const dead = deadReplicaSyncsLeft-- > 0 ? input.baseUrls.filter((u) => opts.deadReplicas?.includes(u)) : [];
      if (dead.length) {
        const live = input.baseUrls.length - dead.length;
        if (input.quorum === undefined || live < input.quorum) {
          const { ApplicationFailure } = await import('@temporalio/common');
          throw ApplicationFailure.nonRetryable(`replica(s) down (fake): ${dead.join(', ')}`, 'InferenceUnavailable');
        }
        events.push({ t: now(), what: 'sync-quorum', version: input.policyVersion });
        inferenceOut = false;
        return { policyVersion: input.policyVersion, loaded: [], alreadyLoaded: [], unloaded: [], ms: 1, behind: dead };
      }
      inferenceOut = false;
      return { policyVersion: input.policyVersion, loaded: [], alreadyLoaded: [], unloaded: [], ms: 1 };
    },
    async unloadRunAdapters(input: { runId: string; baseUrls: string[] }) {
      unloads.push(input.runId);
      events.push({ t: now(), what: 'unload-adapters' });
      return { unloaded: [], down: [] };
    },
    async recordStep(input: RecordStepInput): Promise<StepSummary> {
      if (storeDownLeft > 0) {
        storeDownLeft--;
        events.push({ t: now(), what: 'store-down', step: input.record.step });
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable('artifact store s3://b/p is unreachable (fake)', 'StoreUnavailable');
      }
      records.push(input);
      const r = input.record;
      return { step: r.step, meanReward: r.mean_reward, components: r.reward_components, rollouts: r.rollouts, dropped: 0, policyVersion: r.policy_version };
    },
    async prepareSftData(input: PrepareSftDataInput) {
      sftPrepares.push(input);
      events.push({ t: now(), what: 'prepareSftData' });
      return { data: ref('sft-data'), trajectories: 10, rejected: 0 };
    },
    async buildSftBatch(input: BuildSftBatchInput) {
      sftBatches.push(input);
      events.push({ t: now(), what: 'buildSftBatch', step: input.step });
      return { batch: ref(`batch-${input.step}`), manifest: ref(`manifest-${input.step}`), summary: { samples: input.batchSize, dropped: {} } };
    },
    /** As src/records/fallback.ts, over the records in memory: the newest winning record whose checkpoint is sound. */
    async fallBackToVerifiedCheckpoint(input: CheckpointFallbackInput): Promise<CheckpointFallbackResult> {
      events.push({ t: now(), what: 'fallback', step: input.state.completedStep });
      const corrupt = opts.corruptCheckpoints ?? [];
      if (!input.state.checkpoint || !corrupt.includes(ckptStep(input.state.checkpoint))) {
        const result = { fellBack: false } as const;
        fallbacks.push({ input, result });
        return result;
      }
      const winners = new Map<number, RecordStepInput['record']>();
      for (const { record } of records) if (record.step <= input.state.completedStep) winners.set(record.step, record);
      const used = [...winners.values()].sort((a, b) => b.step - a.step).find((r) => r.checkpoint && !corrupt.includes(ckptStep(r.checkpoint)));
      const epoch = (input.state.epoch ?? 0) + 1;
      const usedStep = used?.step ?? -1;
      const result: CheckpointFallbackResult = {
        fellBack: true,
        record: {
          format: 'ratchet.checkpoint-fallback/v1', run_id: input.state.runId, epoch, time: input.time, by: 'trainer-load',
          bad: { checkpoint: input.state.checkpoint, adapter: input.state.adapter, step: input.state.completedStep, error: input.error },
          ...(used ? { used: { checkpoint: used.checkpoint!, adapter: used.adapter, step: used.step, policy_version: used.policy_version } } : {}),
          skipped: [], retrained_steps: Array.from({ length: input.state.completedStep - usedStep }, (_, i) => usedStep + 1 + i),
        },
        state: {
          ...input.state, completedStep: usedStep, nextStep: usedStep + 1, policyVersion: used?.policy_version ?? 0,
          checkpoint: used?.checkpoint, adapter: used?.adapter, epoch,
        },
      };
      fallbacks.push({ input, result });
      return result;
    },
    /** As the real evalPlan (src/activities/eval.ts), over the records in memory: the version must be recorded already. */
    async evalPlan(input: EvalSweepInput): Promise<EvalPlan> {
      evalPlans.push(input);
      const v = input.versions![0]!;
      events.push({ t: now(), what: 'eval-plan', version: v });
      const rec = records.find((r) => r.record.run_id === input.runId && r.record.policy_version === v);
      if (!rec) {
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable(`run "${input.runId}" has no policy version ${v} (fake)`, 'VersionNotFound');
      }
      const env = config.env[0]!;
      return {
        runId: input.runId, taskset: { name: input.taskset ?? 'heldout', path: '/fake/heldout.jsonl', hash: 'fakehash', tasks: 2 }, k: input.k ?? 4,
        versions: [v], skipped: [], envId: env.id, taskSetDir: '/fake', sampling: config.sampling, envArgs: env.args, rubric: env.rubric, sandbox: config.sandbox,
        tasks: [0, 1].map((i) => ({ instanceId: `held-${i}`, datasetPath: '/fake/heldout.jsonl', hasTests: false })),
        inferenceBaseUrl: config.inference.base_urls[0], servedModel: config.inference.served_model, seed: 0,
        adapters: rec.record.adapter ? { [String(v)]: rec.record.adapter } : {},
      };
    },
    async evalRecord(input: RecordEvalInput): Promise<EvalVersionSummary> {
      if (opts.evalMs) await sleep(opts.evalMs);
      const scored = input.episodes.filter((e) => e.summary);
      const meanReward = scored.reduce((a, e) => a + e.summary!.reward, 0) / Math.max(1, scored.length);
      events.push({ t: now(), what: 'eval-record', version: input.version });
      return { version: input.version, key: `runs/${input.plan.runId}/evals/${input.version}/fakehash.json`, passAt1: null, passAtK: null,
        meanReward, fileF1: null, functionF1: null, episodes: input.episodes.length, errors: input.episodes.length - scored.length };
    },
    async buildBatch(input: BuildBatchInput) {
      batches.push(input);
      events.push({ t: now(), what: 'buildBatch', step: input.step, version: input.trainerPolicyVersion });
      if (opts.emptyBatchSteps?.includes(input.step)) {
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable(`step ${input.step}: no sample has a trainable token (stale: ${summariesOf(input).length})`, 'EmptyBatch');
      }
      return { batch: ref(`batch-${input.step}`), manifest: ref(`manifest-${input.step}`), summary: { samples: summariesOf(input).length, dropped: {}, ...(opts.trainerCost ? { trainable_tokens: 7 * summariesOf(input).length } : {}) } };
    },
  };

  const rollout = {
    async rollout(input: RolloutInput): Promise<RolloutSummary> {
      rolloutInputs.push(input);
      events.push({ t: now(), what: 'rollout-start', step: input.step, version: input.policyVersion, rollout: `${input.groupId}/${input.rolloutIndex}` });
      if (opts.chunkFailures?.(input, chunkAttempt())) {
        events.push({ t: now(), what: 'rollout-lost', step: input.step, rollout: `${input.groupId}/${input.rolloutIndex}` });
        throw new Error('rollout worker lost mid-chunk (fake)');
      }
      if (opts.rolloutMs) await sleep(opts.rolloutMs);
      if (rolloutDiskFullLeft > 0) {
        rolloutDiskFullLeft--;
        events.push({ t: now(), what: 'rollout-disk-full', step: input.step });
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable('disk full writing /art/runs/r/steps/0/rollouts/g/0.json (ENOSPC) (fake)', 'DiskFull');
      }
      if (rolloutStoreDownLeft > 0) {
        rolloutStoreDownLeft--;
        events.push({ t: now(), what: 'rollout-store-down', step: input.step });
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable('artifact store s3://b/p is unreachable (fake)', 'StoreUnavailable');
      }
      if (inferenceOut) {
        events.push({ t: now(), what: 'rollout-inference-down', step: input.step });
        throw new Error('connect ECONNREFUSED 127.0.0.1:8000 (fake model server)');
      }
      const reward = opts.rewardOf ? opts.rewardOf(input) : (input.rolloutIndex + input.step) / 10;
      return {
        task_id: taskIdOf(input.task), group_id: input.groupId, rollout_index: input.rolloutIndex,
        trajectory: ref(`traj-${input.step}-${input.groupId}-${input.rolloutIndex}`),
        reward, components: { correct: reward, completion: 1 }, stop_reason: 'completed',
        policy_version: input.policyVersion, completion_tokens: 10, tool_calls: 1, model_ms: 1, tools_ms: 1, sandbox_ms: 1,
        ...(opts.sandboxCost ? { sandbox: opts.sandboxCost } : {}),
      };
    },
  };

  // The real chunk activity around the fake rollout: manifest, heartbeat details, resume of the missing.
  Object.assign(rollout, createChunkActivity({ store, runOne: (input) => rollout.rollout(input) }));

  const announce = {
    async 'trainer.announce'(input: { run_id?: string }) {
      if (opts.leases) {
        // A fixed pool of trainers: the first free one (or the one this run holds) answers.
        const runId = input.run_id!;
        const pool = Array.from({ length: opts.leases }, (_, i) => `w${i + 1}`);
        let worker = pool.find((w) => !leased.has(w) || leased.get(w) === runId);
        const ended = worker ? undefined : pool.find((w) => opts.endedRuns?.has(leased.get(w)!));
        const freed = ended ? leased.get(ended) : undefined;
        worker ??= ended;
        if (!worker) {
          const { ApplicationFailure } = await import('@temporalio/common');
          throw ApplicationFailure.retryable(`every trainer is leased (fake); ${runId} waits`, 'TrainerBusy');
        }
        leased.set(worker, runId);
        announces++;
        events.push({ t: now(), what: 'announce', worker });
        return { task_queue: `trainer-${worker}`, worker_id: worker, ...(freed ? { freed_run_id: freed } : {}) };
      }
      announces++;
      const worker = `w${announces}`;
      events.push({ t: now(), what: 'announce', worker });
      return { task_queue: `trainer-${worker}`, worker_id: worker };
    },
  };

  // One trainer worker's activities; state is what the real trainer keeps in memory.
  const trainerFor = (worker: string) => {
    let version = 0;
    return {
      async 'trainer.load'(input: { run_id: string; checkpoint?: ArtifactRef; init?: unknown; trainer_config?: { loss?: { kind?: string } } }) {
        loads.push({ worker, checkpoint: input.checkpoint, lossKind: input.trainer_config?.loss?.kind, ...(input.init !== undefined ? { init: input.init } : {}) });
        if (input.checkpoint && opts.corruptCheckpoints?.includes(ckptStep(input.checkpoint))) {
          const { ApplicationFailure } = await import('@temporalio/common');
          throw ApplicationFailure.nonRetryable(`checkpoint ${input.checkpoint.uri}/adapter/adapter_model.safetensors is corrupt: recorded sha256 aa, found bb (fake)`, 'ArtifactError');
        }
        version = input.checkpoint ? Number(/step-(\d+)/.exec(input.checkpoint.uri)![1]) + 1 : 0;
        return { step: version - 1, policy_version: version, ledger: [] };
      },
      async 'trainer.step'(input: { run_id: string; step: number; lr?: number }) {
        events.push({ t: now(), what: 'train-start', step: input.step, worker, ...(input.lr !== undefined ? { lr: input.lr } : {}) });
        const fault = opts.stepFaults?.[input.step];
        if (fault) {
          delete opts.stepFaults![input.step];
          const { ApplicationFailure } = await import('@temporalio/common');
          throw ApplicationFailure.nonRetryable(`step ${input.step}: ${fault} (fake); nothing applied`, fault);
        }
        const faults = opts.processFaults?.[input.step];
        if (faults?.length) {
          const errorClass = faults.shift()!;
          events.push({ t: now(), what: 'trainer-fault', step: input.step, worker });
          const { ApplicationFailure } = await import('@temporalio/common');
          throw ApplicationFailure.create({ message: `trainer ${worker} failed trainer.step with ${errorClass} (fake)`, type: 'TrainerFault',
            nonRetryable: true, details: [{ error_class: errorClass, worker_id: worker, activity: 'trainer.step' }] });
        }
        if (opts.killingSteps?.includes(input.step) && !killed.has(worker) && killed.size < (opts.killingTimes ?? Infinity)) {
          // The batch crashes the process mid-step: the step heartbeated (it started), then silence.
          killed.add(worker);
          events.push({ t: now(), what: 'trainer-killed', step: input.step, worker });
          Context.current().heartbeat({ phase: 'lock acquired', step: input.step });
        }
        if (killed.has(worker) || (opts.deadTrainers?.includes(worker) && input.step >= (opts.deadFromStep ?? 0))) {
          // A dead trainer: never heartbeats, never answers (bounded so the test worker can shut down).
          await Promise.race([sleep(8000), new Promise((r) => Context.current().cancellationSignal.addEventListener('abort', r))]);
          throw new Error('dead trainer (fake)');
        }
        if (opts.trainMs) await sleep(opts.trainMs);
        const key = `${input.run_id}/${input.step}`;
        applied.set(key, (applied.get(key) ?? 0) + 1);
        version++;
        events.push({ t: now(), what: 'train-end', step: input.step, worker });
        return { loss: 0.5, applied: true, tokens: 100, ...(opts.trainerCost ?? {}) };
      },
      async 'trainer.save'(input: { run_id: string; step: number }) {
        if (diskFullLeft > 0) {
          diskFullLeft--;
          events.push({ t: now(), what: 'disk-full', step: input.step });
          const { ApplicationFailure } = await import('@temporalio/common');
          throw ApplicationFailure.nonRetryable(`disk full writing /art/runs/${input.run_id}/checkpoints/${input.step} (ENOSPC) (fake)`, 'DiskFull');
        }
        // Full fine-tuning saves model/ in the checkpoint and no adapter (trainer/ratchet_trainer/core/checkpoint.py).
        const full = config.trainer.mode === 'full';
        return { checkpoint: ref(`ckpt-step-${input.step}`), adapter: full ? null : ref(`adapter-step-${input.step}`), policy_version: version };
      },
      async 'trainer.release'(input: { run_id: string }) {
        releases.push({ worker, runId: input.run_id });
        events.push({ t: now(), what: 'release', worker });
        const released = leased.get(worker) === input.run_id;
        if (released) leased.delete(worker);
        return { released, worker_id: worker };
      },
    };
  };

  /** An inference host's worker (src/workers/inference.ts): syncWeights for its own vLLM. */
  const hostSyncs: { host: string; input: SyncWeightsInput }[] = [];
  const inferenceHost = (host: string) => ({
    async syncWeights(input: SyncWeightsInput) {
      hostSyncs.push({ host, input });
      if (opts.hostQueues?.[host] === 'down') {
        const { ApplicationFailure } = await import('@temporalio/common');
        throw ApplicationFailure.nonRetryable(`host ${host}: replica down (fake)`, 'InferenceUnavailable');
      }
      return { policyVersion: input.policyVersion, loaded: [`${host}#v${input.policyVersion}`], alreadyLoaded: [], unloaded: [], ms: 1 };
    },
  });
  return { config, main, rollout, announce, trainerFor, events, records, evalPlans, fallbacks, batches, summariesOf, loads, syncs, rolloutInputs, inferenceHost, hostSyncs, applied, releases, unloads, leased, announces: () => announces,
    sftPrepares, sftBatches, pools, sampleInputs, manifestInputs };
}
