/**
 * One agent episode in its sandbox: the task's row, a sandbox with its
 * repository, the environment's setup, the shared agent loop, and the final
 * answer, read before the sandbox is released. Whatever the agent does ends in
 * an episode; the infrastructure failing is reported as `infra`, never scored.
 */
import { performance } from 'node:perf_hooks';
import { ApplicationFailure } from '@temporalio/common';
import { runAgent, type AgentResult } from '../agent/loop';
import type { ModelClient } from '../agent/model';
import type { ToolContext } from '../agent/tool';
import type { ParsedRolloutInput } from '../contracts/rollout';
import { REPO_DIR, type AcquireOptions, type Sandbox, type SandboxManager } from '../envs/sandbox';
import type { Environment } from '../envs/types';
import { harnessSpecFor, runHarness } from '../harness/run';
import type { Liveness } from '../shared/liveness';
import type { Logger } from '../shared/logger';
import type { Task } from '../tasks/schema';
import { isTaskSetupError } from '../tasks/setupError';
import { invalidRolloutTask, isSandboxLost, isSandboxUnreachable, isTransientReadError } from './errors';
import { rolloutTask, sandboxSource } from './task';

export interface EpisodeParams {
  input: ParsedRolloutInput;
  env: Environment;
  sandboxes: SandboxManager;
  model: ModelClient;
  live: Liveness;
  log: Logger;
}

/** The task could not be set up (its row, its repository, or env.setup): the agent never ran. */
export interface SetupFailed {
  setupError: string;
}

export interface Ran {
  task: Task;
  /** How the episode's sandbox was made: scoring makes a fresh one the same way. */
  acquire: AcquireOptions;
  result: AgentResult;
  /** The environment's final answer; empty when it could not be read. */
  final: Record<string, unknown>;
  sandboxMs: number;
  /** Set when the infrastructure, not the agent, ended or spoiled the episode. */
  infra?: string;
}

export type Episode = SetupFailed | Ran;

export const isSetupFailed = (e: Episode): e is SetupFailed => 'setupError' in e;

export async function runEpisode({ input, env, sandboxes, model, live, log }: EpisodeParams): Promise<Episode> {
  // Cancelled by Temporal, or one heartbeat timeout after the watchdog saw no progress.
  const signal = live.signal;
  // A task that cannot be set up is one dropped rollout, not a failed run.
  const setupFailed = (err: unknown): SetupFailed => ({ setupError: (err as Error).message });
  let task: Task;
  try {
    task = await rolloutTask(input.task, input.taskSetDir);
  } catch (err) {
    // The row is missing from a file that exists: that task's problem. A read that failed (EMFILE, EIO,
    // a file not yet on this host) is retried; only a file that stays wrong is the run's bad input.
    if (isTaskSetupError(err)) return setupFailed(err);
    if (isTransientReadError(err)) throw ApplicationFailure.retryable(`reading the task file failed: ${(err as Error).message}`, 'TaskReadError');
    throw invalidRolloutTask((err as Error).message);
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
    sandbox = await sandboxes.acquire(acquire);
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
  let infra: string | undefined;
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
        if (!isSandboxUnreachable(err)) return { setupError: `environment setup failed: ${(err as Error).message}` };
        infra = `the sandbox failed during setup: ${(err as Error).message}`;
      }
    }
    result = infra !== undefined ? noEpisode(infra) : env.harness ? await runHarness({
      spec: harnessSpecFor(env.harness, input.envArgs),
      upstream: input.inferenceBaseUrl,
      modelName: input.modelName,
      policyVersion: input.policyVersion,
      sampling: input.sampling,
      limits,
      ctx: toolCtx,
      instruction: env.userPrompt(task),
      workdir: REPO_DIR,
      signal,
      log,
      progress: () => live.progress({ phase: 'agent' }),
    }) : await runAgent({
      model,
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
      log,
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
        const message = (err as Error).message;
        if (await isSandboxLost(err, sandbox)) {
          // The container died before the answer was read: nothing the agent did, so no score.
          infra = `the sandbox was lost before the final answer was read: ${message}`;
          result = { ...result, stop_reason: 'error', error: infra };
        } else {
          // The agent broke its own sandbox (e.g. deleted the repository): a penalty, not a retry.
          result = { ...result, stop_reason: 'error', error: `reading the final answer failed: ${message}` };
        }
      }
      sandboxMs += performance.now() - t;
    }
  } finally {
    t = performance.now();
    await sandbox.release().catch((err: Error) => log.warn({ err: err.message }, 'sandbox release failed; the janitor will remove it'));
    sandboxMs += performance.now() - t;
  }
  return { task, acquire, result, final, sandboxMs, ...(infra !== undefined ? { infra } : {}) };
}

/** An episode that never started: no messages, no turns, ended by the sandbox. */
export function noEpisode(error: string): AgentResult {
  return {
    messages: [], turns: [], stop_reason: 'error', error,
    stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
    model_ms: 0, tools_ms: 0,
  };
}
