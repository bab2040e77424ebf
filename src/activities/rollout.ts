import { performance } from 'node:perf_hooks';
import * as path from 'node:path';
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import { z } from 'zod';
import { runAgent, type AgentResult } from '../agent/loop';
import { OpenAIModelClient, type ModelClient } from '../agent/model';
import { toolSpec, type ToolContext } from '../agent/tool';
import type { ArtifactStore } from '../artifacts/store';
import { asActivityFailure, storeFor, type StoreSettings } from '../artifacts/stores';
import { ArtifactsFields, RunConfig } from '../config/schema';
import { runKeys } from './config';
import { loadEnvironment } from '../envs/load';
import { ENVIRONMENTS } from '../envs/registry';
import type { Environment } from '../envs/types';
import type { AcquireOptions, Sandbox, SandboxManager } from '../envs/sandbox';
import type { TestEvidence } from '../envs/tests';
import { scoreRubric, zeroScore, type Score } from '../envs/types';
import { isUnscored, RolloutSummary, samplingRecord, Trajectory } from '../rollouts/trajectory';
import { componentLogger } from '../shared/logger';
import { EVAL_STEP } from '../shared/steps';
import { loadTask, resolveDataset } from '../tasks/load';
import { Task } from '../tasks/schema';
import { isTaskSetupError, TaskSetupError } from '../tasks/setupError';
import { runTestsWithDiff } from './scoring';
import { withLiveness, type Liveness } from './liveness';
import { LIVENESS_DEFAULTS } from '../shared/liveness';
import { rolloutErrorsTotal, rolloutReward, rolloutSeconds, rolloutsTotal } from '../metrics';

const log = componentLogger('rollout');

const TaskRef = z.object({ datasetPath: z.string().min(1), instanceId: z.string().min(1) }).strict();

/** What the rollout-group workflow sends: small, JSON-only. */
export const RolloutInput = z.object({
  runId: z.string().min(1),
  /** The training step, or EVAL_STEP for an EvalSweep episode. */
  step: z.number().int().min(EVAL_STEP),
  groupId: z.string().min(1),
  rolloutIndex: z.number().int().nonnegative(),
  envId: z.string().min(1),
  /** A reference into the task set (preferred: keeps history small), or the row itself. */
  task: z.union([TaskRef, Task]),
  taskSetDir: z.string().min(1),
  policyVersion: z.number().int().nonnegative(),
  /** `smollm2-135m` for version 0, `<run>/policy-v<N>` after. */
  modelName: z.string().min(1),
  sampling: RunConfig.shape.sampling.removeDefault(),
  envArgs: z.object({
    max_tokens: z.number().int().positive(),
    max_tool_calls: z.number().int().positive(),
    max_turns: z.number().int().positive(),
    few_shot: z.boolean().default(false),
  }).passthrough(),
  rubric: z.record(z.number()).default({}),
  sandbox: RunConfig.shape.sandbox.removeDefault(),
  inferenceBaseUrl: z.string().url(),
  seed: z.number().int().optional(),
  /** Heartbeat period and stall window (the run config's [liveness]); absent in older histories. */
  liveness: z.object({ heartbeat_every_s: z.number().positive(), stall_s: z.number().positive() }).strict().optional(),
  /** The run's [artifacts] store; absent: the worker's default store. */
  artifacts: ArtifactsFields.optional(),
});
export type RolloutInput = z.input<typeof RolloutInput>;

export interface RolloutDeps {
  store: ArtifactStore;
  sandboxes: SandboxManager;
  /** The policy client per inference server; defaults to vLLM over the openai package. Tests script their own. */
  openaiFactory?: (baseUrl: string) => ModelClient;
}

export function trajectoryKey(runId: string, step: number, groupId: string, rolloutIndex: number): string {
  if (step === EVAL_STEP) return `runs/${runId}/evals/trajectories/${groupId}/${rolloutIndex}.json`;
  return `runs/${runId}/steps/${step}/rollouts/${groupId}/${rolloutIndex}.json`;
}

export function createRolloutActivities(deps: RolloutDeps) {
  const clients = new Map<string, ModelClient>();
  const clientFor = (baseUrl: string): ModelClient => {
    let c = clients.get(baseUrl);
    if (!c) {
      c = deps.openaiFactory ? deps.openaiFactory(baseUrl) : new OpenAIModelClient(baseUrl);
      clients.set(baseUrl, c);
    }
    return c;
  };

  /**
   * One agent episode: sandbox, agent loop, final answer, rewards, trajectory
   * saved to the artifact store. Returns only the reference and a summary.
   * Whatever the agent does in its sandbox ends in a penalty, never a crash;
   * infrastructure failures (inference down, Docker gone) throw so Temporal retries.
   */
  /** Environments from modules, per run: the run's stored config says which module an id names. */
  const runEnvModules = new Map<string, Promise<Map<string, string>>>();
  async function environmentFor(runId: string, envId: string, artifacts?: StoreSettings): Promise<Environment> {
    const builtin = (ENVIRONMENTS as Record<string, Environment>)[envId];
    let modules = runEnvModules.get(runId);
    if (!modules) {
      modules = (async () => {
        // The config lives in the run's own store (an s3:// run shares no disk with this worker).
        const runStore = storeFor(artifacts, deps.store);
        // A store error here is not bad input: it is retried (StoreUnavailable: the step waits for the store).
        const ref = await runStore.exists(runKeys.config(runId));
        const stored = ref ? await runStore.getJson(ref) : undefined;
        const config = ref ? await nonRetryable(async () => RunConfig.parse(stored)) : undefined;
        return new Map((config?.env ?? []).flatMap((e) => (e.module ? [[e.id, e.module] as [string, string]] : [])));
      })();
      runEnvModules.set(runId, modules);
      modules.catch(() => runEnvModules.delete(runId));
    }
    const module = (await modules).get(envId);
    if (module === undefined && builtin) return builtin;
    // A bad env id or module is the run's input, the same for every rollout: it fails the step loudly.
    return nonRetryable(async () => loadEnvironment({ id: envId, module }));
  }

  async function rollout(rawInput: RolloutInput): Promise<RolloutSummary> {
    const t0 = performance.now();
    try {
      const summary = await episode(rawInput);
      rolloutsTotal.inc({ env: rawInput.envId, stop_reason: summary.stop_reason });
      // A dropped rollout (infra_error, setup_error) has no reward to show.
      if (!isUnscored(summary)) rolloutReward.observe({ env: rawInput.envId }, summary.reward);
      rolloutSeconds.observe({ env: rawInput.envId }, (performance.now() - t0) / 1000);
      return summary;
    } catch (err) {
      rolloutErrorsTotal.inc({ env: rawInput.envId ?? 'unknown' });
      // Saving the trajectory found its disk full, or the store unreachable: StepRollouts waits
      // (waiting-for-disk, waiting-for-store) without using the rollout's attempts.
      throw asActivityFailure(err);
    }
  }

  async function episode(rawInput: RolloutInput): Promise<RolloutSummary> {
    const parsed = RolloutInput.safeParse(rawInput);
    if (!parsed.success) {
      throw ApplicationFailure.nonRetryable(`invalid rollout input: ${parsed.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`, 'InvalidRolloutInput');
    }
    const input = parsed.data;
    const windows = input.liveness ?? { heartbeat_every_s: LIVENESS_DEFAULTS.heartbeat_every_s, stall_s: LIVENESS_DEFAULTS.rollout_stall_s };
    return withLiveness(
      { name: 'rollout', heartbeatEveryMs: windows.heartbeat_every_s * 1000, stallMs: windows.stall_s * 1000, logger: log },
      (live) => runEpisode(input, live),
    );
  }

  async function runEpisode(input: z.output<typeof RolloutInput>, live: Liveness): Promise<RolloutSummary> {
    const started = performance.now();
    // Cancelled by Temporal, or one heartbeat timeout after the watchdog saw no progress.
    const signal = live.signal;
    const env = await environmentFor(input.runId, input.envId, input.artifacts);
    const taskId = 'instance_id' in input.task ? (input.task as Task).instance_id : (input.task as { instanceId: string }).instanceId;
    const rlog = log.child({ run: input.runId, step: input.step, group: input.groupId, rollout: input.rolloutIndex, env: env.id, task: taskId });
    // A task that cannot be set up is one dropped rollout, not a failed run.
    const setupFailed = (err: unknown) => recordSetupFailure(input, env, taskId, (err as Error).message, started, rlog);
    let task: Task;
    try {
      task = 'instance_id' in input.task
        ? (input.task as Task)
        : await loadTask(resolveDataset((input.task as { datasetPath: string }).datasetPath, input.taskSetDir), taskId);
    } catch (err) {
      // The row is missing from a file that exists: that task's problem. A read that failed (EMFILE, EIO,
      // a file not yet on this host) is retried; only a file that stays wrong is the run's bad input.
      if (isTaskSetupError(err)) return setupFailed(err);
      if (isTransientReadError(err)) throw ApplicationFailure.retryable(`reading the task file failed: ${(err as Error).message}`, 'TaskReadError');
      throw ApplicationFailure.nonRetryable((err as Error).message, 'InvalidRolloutTask');
    }

    let source: Pick<AcquireOptions, 'image' | 'repo' | 'imageRepo'> = {};
    try {
      if (task.source || env.needsRepository !== false) source = sandboxSource(task, input.taskSetDir);
    } catch (err) {
      return setupFailed(err);
    }
    const acquire: AcquireOptions = {
      ...source,
      labels: { run: input.runId, step: input.step, rollout: `${input.groupId}-${input.rolloutIndex}` },
      limits: input.sandbox,
      signal,
    };
    const limits = { max_tokens: input.envArgs.max_tokens, max_tool_calls: input.envArgs.max_tool_calls, max_turns: input.envArgs.max_turns };
    const execTimeoutMs = input.sandbox.exec_timeout_s * 1000;

    let sandboxMs = 0;
    let t = performance.now();
    live.progress({ phase: 'acquiring sandbox' });
    let sandbox: Sandbox;
    try {
      sandbox = await deps.sandboxes.acquire(acquire);
    } catch (err) {
      // The snapshot cannot give this task's repository (e.g. the base commit is not in it).
      // Anything else (Docker down) throws as before, and Temporal retries.
      if (isTaskSetupError(err) && !signal?.aborted) return setupFailed(err);
      throw err;
    }
    sandboxMs += performance.now() - t;
    live.progress({ phase: 'sandbox acquired' });

    let result: AgentResult;
    let final: Record<string, unknown> = {};
    // Set when the infrastructure, not the agent, ended or spoiled the episode.
    let infra: string | undefined;
    // Set when the environment's setup failed on this task.
    let setupError: string | undefined;
    try {
      const toolCtx: ToolContext = { sandbox, task, state: {}, execTimeoutMs, signal };
      if (env.setup) {
        try {
          await env.setup(toolCtx);
        } catch (err) {
          if (signal?.aborted) throw err;
          // A sandbox or dockerd that is gone says nothing about the task: an infrastructure
          // failure (retried, then infra_error). Otherwise the environment's setup failed on
          // this task, the same on every retry.
          if (isSandboxUnreachable(err)) infra = `the sandbox failed during setup: ${(err as Error).message}`;
          else setupError = `environment setup failed: ${(err as Error).message}`;
        }
      }
      if (setupError !== undefined) return await setupFailed(new Error(setupError));
      result = infra !== undefined ? noEpisode(infra) : await runAgent({
        model: clientFor(input.inferenceBaseUrl),
        modelName: input.modelName,
        policyVersion: input.policyVersion,
        messages: [
          { role: 'system', content: env.systemPrompt },
          ...(input.envArgs.few_shot ? env.demonstration : []),
          { role: 'user', content: env.userPrompt(task) },
        ],
        tools: env.tools,
        limits,
        sampling: { ...input.sampling, ...(input.seed !== undefined ? { seed: input.seed } : {}) },
        ctx: toolCtx,
        signal,
        log: rlog,
        heartbeat: (info) => live.progress({ phase: 'agent', ...info }),
        progress: (e) => live.progress({ phase: 'agent', ...e }),
      });
      // The loop ends with "error" only when a tool's sandbox call itself failed (a lost container).
      if (result.stop_reason === 'error' && infra === undefined) infra = `the sandbox failed mid-episode: ${result.error ?? 'unknown error'}`;
      if (result.stop_reason !== 'error') {
        t = performance.now();
        try {
          final = await env.finalize(toolCtx, result.answer);
        } catch (err) {
          // The agent broke its own sandbox (e.g. deleted the repository): a penalty, not a retry.
          result = { ...result, stop_reason: 'error', error: `reading the final answer failed: ${(err as Error).message}` };
        }
        sandboxMs += performance.now() - t;
      }
    } finally {
      t = performance.now();
      await sandbox.release().catch((err: Error) => rlog.warn({ err: err.message }, 'sandbox release failed; the janitor will remove it'));
      sandboxMs += performance.now() - t;
    }

    let tests: TestEvidence | undefined;
    let score: Score;
    if (result.stop_reason === 'error') {
      score = zeroScore(env.rubric, input.rubric);
    } else {
      if (env.needsTests) {
        live.progress({ phase: 'scoring test run' });
        try {
          const out = await runTestsWithDiff({
            sandboxes: deps.sandboxes,
            acquire,
            task,
            diff: typeof final.diff === 'string' ? final.diff : '',
            timeoutMs: Math.max(execTimeoutMs * 3, 60_000),
            signal,
          });
          tests = out.evidence;
          sandboxMs += out.sandboxMs;
          live.progress({ phase: 'scored' });
        } catch (err) {
          if (signal?.aborted) throw err;
          // Docker failing to run the tests says nothing about the agent's diff.
          infra = `the scoring test run failed: ${(err as Error).message}`;
        }
      }
      score = scoreRubric(env.rubric, {
        task, final, answered: result.answer !== undefined, stop_reason: result.stop_reason, stats: result.stats, limits, tests,
      }, input.rubric);
    }
    if (infra !== undefined) {
      const attempt = currentAttempt();
      if (attempt < INFRA_ATTEMPTS) {
        rlog.warn({ attempt, cause: infra }, 'infrastructure failure: retrying the rollout');
        throw ApplicationFailure.create({ type: 'InfrastructureError', message: `infrastructure failure (attempt ${attempt}): ${infra}` });
      }
      // Out of attempts: keep the record, drop the rollout (the batch builder and the step's
      // reward statistics leave infra_error out).
      rlog.warn({ attempt, cause: infra }, 'infrastructure failure on every attempt: rollout dropped');
      result = { ...result, stop_reason: 'infra_error', error: infra };
      score = zeroScore(env.rubric, input.rubric);
    }

    const trajectory = Trajectory.parse({
      format: 'ratchet.trajectory/v1',
      run_id: input.runId,
      step: input.step,
      env_id: env.id,
      task_id: task.instance_id,
      group_id: input.groupId,
      rollout_index: input.rolloutIndex,
      model: input.modelName,
      tools: env.tools.map(toolSpec),
      messages: result.messages,
      turns: result.turns,
      stop_reason: result.stop_reason,
      ...(result.error !== undefined ? { error: result.error } : {}),
      sampling: samplingRecord(input.sampling),
      final: { ...final, ...(tests ? { tests } : {}), reward_weights: score.weights },
      reward: { total: score.total, components: score.components },
      stats: result.stats,
      timing: { model_ms: result.model_ms, tools_ms: result.tools_ms, sandbox_ms: sandboxMs, total_ms: performance.now() - started },
    });
    const ref = await storeFor(input.artifacts, deps.store).putJson(trajectoryKey(input.runId, input.step, input.groupId, input.rolloutIndex), trajectory);
    rlog.info({ reward: score.total, stop: result.stop_reason, turns: result.turns.length, tool_calls: result.stats.tool_calls, ms: Math.round(trajectory.timing.total_ms) }, 'rollout done');

    return RolloutSummary.parse({
      task_id: task.instance_id,
      group_id: input.groupId,
      rollout_index: input.rolloutIndex,
      trajectory: ref,
      reward: score.total,
      components: score.components,
      stop_reason: result.stop_reason,
      policy_version: input.policyVersion,
      completion_tokens: result.stats.completion_tokens,
      tool_calls: result.stats.tool_calls,
      model_ms: result.model_ms,
      tools_ms: result.tools_ms,
      sandbox_ms: sandboxMs,
      prompt_tokens: result.stats.prompt_tokens,
      tools_used: result.stats.tools_used,
      commands: countBy(result.stats.commands),
    });
  }

  /**
   * Saves the trajectory of a rollout whose task could not be set up: no turns, zero reward,
   * stop_reason setup_error with the error kept. The batch builder drops it (cause task_setup)
   * and leaves it out of its group's baseline; the step's reward statistics skip it.
   */
  async function recordSetupFailure(
    input: z.output<typeof RolloutInput>, env: Environment, taskId: string, error: string, started: number, rlog: typeof log,
  ): Promise<RolloutSummary> {
    rlog.warn({ err: error }, 'task cannot be set up: rollout recorded as setup_error and dropped');
    const score = zeroScore(env.rubric, input.rubric);
    const stats = noEpisode(error).stats;
    const totalMs = performance.now() - started;
    const trajectory = Trajectory.parse({
      format: 'ratchet.trajectory/v1',
      run_id: input.runId,
      step: input.step,
      env_id: env.id,
      task_id: taskId,
      group_id: input.groupId,
      rollout_index: input.rolloutIndex,
      model: input.modelName,
      tools: env.tools.map(toolSpec),
      messages: [],
      turns: [],
      stop_reason: 'setup_error',
      error,
      sampling: samplingRecord(input.sampling),
      final: { reward_weights: score.weights },
      reward: { total: score.total, components: score.components },
      stats,
      timing: { model_ms: 0, tools_ms: 0, sandbox_ms: 0, total_ms: totalMs },
    });
    const ref = await storeFor(input.artifacts, deps.store).putJson(trajectoryKey(input.runId, input.step, input.groupId, input.rolloutIndex), trajectory);
    return RolloutSummary.parse({
      task_id: taskId,
      group_id: input.groupId,
      rollout_index: input.rolloutIndex,
      trajectory: ref,
      reward: score.total,
      components: score.components,
      stop_reason: 'setup_error',
      policy_version: input.policyVersion,
      completion_tokens: 0,
      tool_calls: 0,
      model_ms: 0,
      tools_ms: 0,
      sandbox_ms: 0,
      prompt_tokens: 0,
      tools_used: {},
      commands: {},
    });
  }

  return { rollout };
}

export type RolloutActivities = ReturnType<typeof createRolloutActivities>;

/** An episode that never started: no messages, no turns, ended by the sandbox. */
function noEpisode(error: string): AgentResult {
  return {
    messages: [], turns: [], stop_reason: 'error', error,
    stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
    model_ms: 0, tools_ms: 0,
  };
}

/**
 * Errors that say the container or dockerd is gone, not that a command failed in it.
 * Docker's own words (dockerode passes them through) and the socket's error codes.
 */
export function isSandboxUnreachable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e?.code && ['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT'].includes(e.code) && /docker|socket|connect/i.test(e.message ?? '')) return true;
  return /Cannot connect to the Docker daemon|No such container|is not running|connect ECONNREFUSED|connect ENOENT .*docker\.sock|socket hang up|dockerd/i.test(e?.message ?? '');
}

/**
 * Attempts of one rollout activity that an infrastructure failure may use before the
 * rollout is recorded as dropped (stop_reason infra_error). Below the workflows' own
 * maximumAttempts (4 for training, 3 for eval), so the last attempt records, not fails.
 */
export const INFRA_ATTEMPTS = 3;

/** This activity's attempt number; outside an activity (a direct call) there are no retries left. */
function currentAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return INFRA_ATTEMPTS;
  }
}

/**
 * Errors of reading a file that a retry (later, or on another host) may not meet: too many open
 * files, an I/O error, a file not (yet) there, a stale network mount. docs/errors.md lists them.
 */
const TRANSIENT_READ_CODES = ['EMFILE', 'ENFILE', 'EIO', 'ENOENT', 'EAGAIN', 'EBUSY', 'EINTR', 'ESTALE', 'ETIMEDOUT', 'ENOTCONN', 'ECONNRESET', 'EHOSTDOWN', 'ENOMEM'];

export function isTransientReadError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (typeof code === 'string') return TRANSIENT_READ_CODES.includes(code);
  // The Parquet reader's thread reports fs errors as text.
  return new RegExp(`\\b(${TRANSIENT_READ_CODES.join('|')})\\b`).test((err as Error | undefined)?.message ?? '');
}

async function nonRetryable<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw ApplicationFailure.nonRetryable((err as Error).message, 'InvalidRolloutTask');
  }
}

/** Where the sandbox's repository comes from: a git snapshot in the task set, or an image that has it. */
export function sandboxSource(task: Task, taskSetDir: string): Pick<AcquireOptions, 'image' | 'repo' | 'imageRepo'> {
  const source = task.source;
  if (!source) {
    throw new TaskSetupError(`task "${task.instance_id}" has no source; add source: {type: "snapshot", repo_path: "repos/<name>.git"} or {type: "image", image: "..."}`);
  }
  if (source.type === 'image') return { image: source.image, imageRepo: { dir: source.repo_dir, baseCommit: task.base_commit } };
  return { repo: { hostPath: path.resolve(taskSetDir, source.repo_path), baseCommit: task.base_commit } };
}

function countBy(xs: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}
