/**
 * One agent episode in its sandbox: the task's row, a sandbox with its
 * repository, the environment's setup, the shared agent loop, and the final
 * answer, read before the sandbox is released. Whatever the agent does ends in
 * an episode; the infrastructure failing is reported as `infra`, never scored.
 */
import { performance } from 'node:perf_hooks';
import { ApplicationFailure } from '@temporalio/common';
import { ReplayDivergedError, runAgent, type AgentResult, type ReplayTurn } from '../agent/loop';
import type { ModelClient } from '../agent/model';
import type { ToolContext } from '../agent/tool';
import type { ArtifactStore } from '../artifacts/store';
import type { JournalTurn } from '../contracts/journal';
import type { ParsedRolloutInput } from '../contracts/rollout';
import type { ResumeRecord } from '../contracts/trajectory';
import { REPO_DIR, type AcquireOptions, type Sandbox, type SandboxManager } from '../sandbox/interface';
import type { Environment } from '../envs/types';
import { harnessSpecFor, runHarness } from '../harness/run';
import type { Liveness } from '../shared/liveness';
import type { Logger } from '../shared/logger';
import type { Task } from '../tasks/schema';
import { isTaskSetupError } from '../tasks/setupError';
import { invalidRolloutTask, isSandboxLost, isSandboxUnreachable, isTransientReadError } from './errors';
import { newAttemptId, readJournal, replayTurnOf, TurnJournal } from './journal';
import { rolloutTask, sandboxSource } from './task';

export interface EpisodeParams {
  input: ParsedRolloutInput;
  env: Environment;
  sandboxes: SandboxManager;
  model: ModelClient;
  live: Liveness;
  log: Logger;
  /**
   * Where the rollout's turn journal lives (the run's artifact store): each turn is written there as it
   * completes, and an attempt that finds turns of an earlier one replays them instead of sampling them
   * again (src/rollouts/journal.ts). Absent: no journal.
   */
  store?: ArtifactStore;
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

export async function runEpisode({ input, env, sandboxes, model, live, log, store }: EpisodeParams): Promise<Episode> {
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

  // The turns an earlier attempt of this rollout journaled, if any: replayed, not sampled again.
  let journal: TurnJournal | undefined;
  let chain: JournalTurn[] = [];
  let resume: ResumeRecord | undefined;
  if (store) {
    journal = new TurnJournal(store, input, newAttemptId(), log);
    try {
      chain = await readJournal(store, input, log);
    } catch (err) {
      // Only a retry's time is at stake: start over (recording why) rather than fail the rollout.
      log.warn({ err: (err as Error).message }, 'turn journal: reading it failed; the episode starts over');
      resume = { outcome: 'restarted-unreadable', turns_journaled: 0, turns_replayed: 0, error: (err as Error).message };
    }
    if (chain.length > 0) log.info({ turns: chain.length, attempt: journal.attempt }, 'turn journal: resuming the episode from an earlier attempt');
  }

  const state = { sandboxMs: 0 };
  let episode: Episode;
  try {
    journal?.continueFrom(chain);
    episode = await episodeInSandbox(chain);
    if (chain.length > 0) resume = { outcome: 'resumed', turns_journaled: chain.length, turns_replayed: chain.length };
  } catch (err) {
    if (!(err instanceof ReplayDivergedError)) throw err;
    // The fresh sandbox answered a journaled tool call otherwise (a command that reads the clock, a
    // random name...): the turns after it were sampled on outputs this sandbox cannot give. Start over.
    const part = chain[err.turn]!;
    log.warn({ turn: err.turn + 1, expected: err.expected.slice(0, 200), actual: err.actual.slice(0, 200) }, 'turn journal: a replayed tool output differs; the episode starts over');
    await journal?.markDiverged(part, err.expected, err.actual);
    resume = { outcome: 'restarted-diverged', turns_journaled: chain.length, turns_replayed: 0, diverged_at_turn: err.turn };
    journal?.continueFrom([]);
    episode = await episodeInSandbox([]);
  }
  if (resume && !isSetupFailed(episode)) episode.result = { ...episode.result, resume };
  return episode;

  async function episodeInSandbox(replay: JournalTurn[]): Promise<Episode> {
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
    state.sandboxMs += performance.now() - t;
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
      // An external harness (no turn journal: its requests come through the endpoint, src/harness/run.ts).
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
        // The journal's position rides in the heartbeat details: turns kept so far, replayed or new.
        heartbeat: (info) => live.progress({ phase: 'agent', ...info, ...(journal ? { journal_turns: replay.length + journal.written } : {}) }),
        progress: (e) => live.progress({ phase: 'agent', ...e }),
        replay: replay.map(replayTurnOf),
        ...(journal ? { onTurn: (turn: number, rt: ReplayTurn) => journal!.append(turn, rt) } : {}),
      });
      // The loop ends with "error" only when a tool's sandbox call itself failed (a lost container).
      // An external harness's "error" is its own failure (crash, no final answer, flooding): a scored,
      // failed episode; its infrastructure failures throw instead (src/harness/run.ts).
      if (result.stop_reason === 'error' && infra === undefined && !env.harness) infra = `the sandbox failed mid-episode: ${result.error ?? 'unknown error'}`;
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
        state.sandboxMs += performance.now() - t;
      }
    } finally {
      t = performance.now();
      await sandbox.release().catch((err: Error) => log.warn({ err: err.message }, 'sandbox release failed; the janitor will remove it'));
      state.sandboxMs += performance.now() - t;
    }
    return { task, acquire, result, final, sandboxMs: state.sandboxMs, ...(infra !== undefined ? { infra } : {}) };
  }
}

/** An episode that never started: no messages, no turns, ended by the sandbox. */
export function noEpisode(error: string): AgentResult {
  return {
    messages: [], turns: [], stop_reason: 'error', error,
    stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
    model_ms: 0, tools_ms: 0,
  };
}
