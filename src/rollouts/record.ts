/**
 * A rollout's record, built in one place: the trajectory saved to the artifact
 * store, and the summary that crosses Temporal (a reference to it and a few
 * numbers). Scored, dropped and never-started rollouts are all recorded here.
 */
import { createHash } from 'node:crypto';
import * as path from 'node:path';
import type { AgentResult } from '../agent/loop';
import { toolSpec } from '../agent/tool';
import { runKeys } from '../artifacts/keys';
import type { ArtifactRef } from '../artifacts/ref';
import type { ArtifactStore } from '../artifacts/store';
import type { ParsedRolloutInput } from '../contracts/rollout';
import type { TestEvidence } from '../envs/tests';
import type { Environment, Score } from '../envs/types';
import { RolloutSummary, samplingRecord, Trajectory, type RolloutProvenance, type SandboxCost, type ToolSpec } from '../contracts/trajectory';
import { SUMMARY_BYTES_MAX } from '../config/fanout';
import { invalidRolloutTask } from './errors';

/** What one attempt of a rollout ended with. */
export interface RolloutOutcome {
  taskId: string;
  /** The agent's episode; its stop_reason and error are the rollout's. */
  result: Pick<AgentResult, 'messages' | 'turns' | 'stop_reason' | 'error' | 'stats' | 'model_ms' | 'tools_ms' | 'resume'> & {
    /** The tool specs an external harness sent (src/harness/run.ts); absent: the environment's own tools. */
    tools?: ToolSpec[];
  };
  final: Record<string, unknown>;
  tests?: TestEvidence;
  score: Score;
  sandboxMs: number;
  totalMs: number;
  /** The sandbox image and environment it ran with (the rollout worker's, cached), for the lineage. */
  provenance?: RolloutProvenance;
  /** The rollout's containers and what they cost (src/rollouts/cost.ts). */
  sandbox?: SandboxCost;
}

/** A rollout whose task could not be set up: no turns, zero reward, the error kept. */
export function setupFailureOutcome(taskId: string, error: string, score: Score, totalMs: number): RolloutOutcome {
  return {
    taskId,
    result: {
      messages: [], turns: [], stop_reason: 'setup_error', error,
      stats: { prompt_tokens: 0, completion_tokens: 0, tool_calls: 0, tool_errors: 0, commands: [], tools_used: {} },
      model_ms: 0, tools_ms: 0,
    },
    final: {},
    score,
    sandboxMs: 0,
    totalMs,
  };
}

export function trajectoryOf(input: ParsedRolloutInput, env: Pick<Environment, 'id' | 'tools'>, o: RolloutOutcome): Trajectory {
  const { result, score } = o;
  return Trajectory.parse({
    format: 'ratchet.trajectory/v1',
    run_id: input.runId,
    step: input.step,
    env_id: env.id,
    task_id: o.taskId,
    group_id: input.groupId,
    rollout_index: input.rolloutIndex,
    model: input.modelName,
    tools: result.tools && result.tools.length > 0 ? result.tools : env.tools.map(toolSpec),
    messages: result.messages,
    turns: result.turns,
    stop_reason: result.stop_reason,
    ...(result.error !== undefined ? { error: result.error } : {}),
    sampling: samplingRecord(input.sampling),
    final: { ...o.final, ...(o.tests ? { tests: o.tests } : {}), reward_weights: score.weights },
    reward: { total: score.total, components: score.components },
    stats: result.stats,
    timing: { model_ms: result.model_ms, tools_ms: result.tools_ms, sandbox_ms: o.sandboxMs, total_ms: o.totalMs },
    ...(result.resume ? { resume: result.resume } : {}),
    ...(hasProvenance(o.provenance) ? { provenance: o.provenance } : {}),
  });
}

function hasProvenance(p: RolloutProvenance | undefined): p is RolloutProvenance {
  return !!p && (p.image !== undefined || p.env !== undefined);
}

/** Programs a summary names at most in `commands` (the most used; the rest are counted under OTHER_COMMANDS). */
export const COMMANDS_NAMED = 32;
/** A program's name in `commands`, cut to this many characters (an agent may run anything). */
export const COMMAND_NAME_CHARS = 64;
export const OTHER_COMMANDS = '(other)';

/**
 * A summary as it crosses Temporal (heartbeat details, a failed chunk's details, a chunk's result): its
 * `commands` map bounded (the agent chooses its keys), then its size checked against SUMMARY_BYTES_MAX,
 * which the fan-out's checks count on (src/config/fanoutChecks.ts). Still over it: the field that is
 * too large is named.
 */
export function boundedSummary(summary: RolloutSummary): RolloutSummary {
  const out = summary.commands ? { ...summary, commands: boundedCommands(summary.commands) } : summary;
  const bytes = Buffer.byteLength(JSON.stringify(out));
  if (bytes <= SUMMARY_BYTES_MAX) return out;
  const largest = Object.entries(out).map(([k, v]) => [k, Buffer.byteLength(JSON.stringify(v) ?? '')] as const).sort((a, b) => b[1] - a[1])[0]!;
  throw invalidRolloutTask(`rollout ${out.group_id}/${out.rollout_index}: its summary is ${bytes} bytes, over the ${SUMMARY_BYTES_MAX}-byte bound a chunk's heartbeat counts on; ` +
    `its largest field is ${largest[0]} (${largest[1]} bytes). Fix: shorten the task id or the rubric's component names (the environment's)`);
}

function boundedCommands(commands: Record<string, number>): Record<string, number> {
  const byName = new Map<string, number>();
  for (const [k, n] of Object.entries(commands)) {
    const name = k.length > COMMAND_NAME_CHARS ? k.slice(0, COMMAND_NAME_CHARS) : k;
    byName.set(name, (byName.get(name) ?? 0) + n);
  }
  const sorted = [...byName].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1));
  const out = Object.fromEntries(sorted.slice(0, COMMANDS_NAMED));
  const rest = sorted.slice(COMMANDS_NAMED).reduce((a, [, n]) => a + n, 0);
  if (rest > 0) out[OTHER_COMMANDS] = (out[OTHER_COMMANDS] ?? 0) + rest;
  return out;
}

export function summaryOf(input: ParsedRolloutInput, o: RolloutOutcome, trajectory: RolloutSummary['trajectory']): RolloutSummary {
  return boundedSummary(summaryUnbounded(input, o, trajectory));
}

function summaryUnbounded(input: ParsedRolloutInput, o: RolloutOutcome, trajectory: RolloutSummary['trajectory']): RolloutSummary {
  const { result, score } = o;
  return RolloutSummary.parse({
    task_id: o.taskId,
    group_id: input.groupId,
    rollout_index: input.rolloutIndex,
    trajectory,
    reward: score.total,
    components: score.components,
    stop_reason: result.stop_reason,
    policy_version: input.policyVersion,
    completion_tokens: result.stats.completion_tokens,
    tool_calls: result.stats.tool_calls,
    model_ms: result.model_ms,
    tools_ms: result.tools_ms,
    sandbox_ms: o.sandboxMs,
    prompt_tokens: result.stats.prompt_tokens,
    tools_used: result.stats.tools_used,
    commands: countBy(result.stats.commands),
    ...(hasProvenance(o.provenance) ? { provenance: o.provenance } : {}),
    ...(o.sandbox ? { sandbox: o.sandbox } : {}),
  });
}

/**
 * Saves the trajectory under its content-keyed key in the run's store; returns it with the summary
 * that refers to it. Each attempt of a rollout writes its own object (the key carries the content's
 * sha256), so a stale attempt that finishes after its retry never overwrites what the retry wrote:
 * readers follow the ref in the summary the workflow recorded, never "the last write" to a key.
 */
export async function recordRollout(
  store: ArtifactStore, input: ParsedRolloutInput, env: Pick<Environment, 'id' | 'tools'>, o: RolloutOutcome,
): Promise<{ trajectory: Trajectory; summary: RolloutSummary }> {
  const trajectory = trajectoryOf(input, env, o);
  return { trajectory, summary: summaryOf(input, o, await saveTrajectory(store, trajectory)) };
}

/** Writes a trajectory under its content-keyed key (runKeys.trajectory with its sha256); returns the ref to it. */
export function saveTrajectory(store: ArtifactStore, trajectory: Trajectory): Promise<ArtifactRef> {
  const text = JSON.stringify(trajectory); // the bytes putJson would write
  const key = runKeys.trajectory(trajectory.run_id, trajectory.step, trajectory.group_id, trajectory.rollout_index, sha256Hex(text));
  return store.put(key, text);
}

function sha256Hex(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

function countBy(xs: string[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const x of xs) out[x] = (out[x] ?? 0) + 1;
  return out;
}

/**
 * The summary of a rollout an earlier attempt already finished and stored (its trajectory is
 * the record): rebuilt from the stored trajectory, so a retried chunk whose heartbeat never
 * reached the server (heartbeats are throttled) adopts it instead of running it again.
 */
export function summaryOfStored(t: Trajectory, ref: ArtifactRef, policyVersion: number): RolloutSummary {
  return boundedSummary(RolloutSummary.parse({
    task_id: t.task_id,
    group_id: t.group_id,
    rollout_index: t.rollout_index,
    trajectory: { uri: ref.uri, sha256: ref.sha256, bytes: ref.bytes },
    reward: t.reward?.total ?? 0,
    components: t.reward?.components ?? {},
    stop_reason: t.stop_reason,
    policy_version: policyVersion,
    completion_tokens: t.stats.completion_tokens,
    tool_calls: t.stats.tool_calls,
    model_ms: t.timing.model_ms,
    tools_ms: t.timing.tools_ms,
    sandbox_ms: t.timing.sandbox_ms,
    prompt_tokens: t.stats.prompt_tokens,
    tools_used: t.stats.tools_used,
    commands: countBy(t.stats.commands),
    ...(t.provenance ? { provenance: t.provenance } : {}),
  }));
}

/**
 * The stored trajectory of rollout (run, step, group, index) that an earlier attempt wrote, if any:
 * the first content-keyed object (`<i>-<sha16>.json`) that parses, names this rollout and matches its
 * key's hash. Two (a stale attempt and its retry both finished) are equally good; the first is taken.
 */
export async function findStoredTrajectory(
  store: ArtifactStore, runId: string, step: number, groupId: string, rolloutIndex: number, listed?: string[],
): Promise<{ trajectory: Trajectory; ref: ArtifactRef } | undefined> {
  const dir = runKeys.rolloutGroup(runId, step, groupId);
  const keys = listed ?? await store.list(dir);
  const name = new RegExp(`^${rolloutIndex}-([0-9a-f]{16})\\.json$`);
  for (const key of keys) {
    const m = name.exec(path.posix.basename(key));
    if (!m || path.posix.dirname(key) !== dir) continue;
    const bytes = await store.read(key);
    if (!bytes) continue;
    const sha = createHash('sha256').update(bytes).digest('hex');
    if (!sha.startsWith(m[1]!)) continue; // a torn or foreign object: not a finished rollout's record
    const parsed = Trajectory.safeParse(JSON.parse(bytes.toString('utf8')));
    if (!parsed.success) continue;
    const t = parsed.data;
    if (t.run_id !== runId || t.step !== step || t.group_id !== groupId || t.rollout_index !== rolloutIndex) continue;
    const ref = await store.exists(key);
    if (ref) return { trajectory: t, ref };
  }
  return undefined;
}
