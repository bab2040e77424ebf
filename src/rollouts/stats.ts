/**
 * Statistics over a step's rollout summaries: the rollout half of its step record.
 * Small and deterministic: TrainRun computed them in workflow code before the
 * `rolloutStatsOf` activity (older histories replay that path), so this imports only types.
 */
import type { RolloutStats } from '../contracts/step';
import type { RolloutSummary } from '../contracts/trajectory';
import { groupSignal, type LimitEnded } from '../samples/groupSignal';

/** `limitEnded`: the run's [orchestrator] limit_ended, which decides which rollouts are in a group's baseline. */
export function rolloutStats(rollouts: RolloutSummary[], trainerPolicyVersion: number, limitEnded?: LimitEnded): RolloutStats {
  // Infrastructure failures and tasks that could not be set up carry no reward: they are
  // counted (stopReasons) but never scored. (Inline, not isUnscored: workflow code imports little.)
  const scored = rollouts.filter((r) => r.stop_reason !== 'infra_error' && r.stop_reason !== 'setup_error');
  const ns = scored.length || 1;
  const n = rollouts.length || 1;
  const mean = scored.reduce((a, r) => a + r.reward, 0) / ns;
  const variance = scored.reduce((a, r) => a + (r.reward - mean) ** 2, 0) / ns;
  const sums: Record<string, number> = {};
  const stopReasons: Record<string, number> = {};
  let completionTokens = 0;
  let toolCalls = 0;
  let promptTokens = 0;
  let staleness = 0;
  const stalenessHistogram: Record<string, number> = {};
  const toolsUsed: Record<string, number> = {};
  const shellCommands: Record<string, number> = {};
  // Where the rollouts ran (their provenance, 0.7 on): distinct values, sorted so the record does not depend on arrival order.
  const images = new Set<string>();
  const envs = new Map<string, { id: string; version: string; sha256: string }>();
  let sandbox: { containers: number; container_s: number; cpu_s: number } | undefined;
  const add = (into: Record<string, number>, from: Record<string, number> | undefined) => {
    for (const [k, v] of Object.entries(from ?? {})) into[k] = (into[k] ?? 0) + v;
  };
  for (const r of scored) for (const [k, v] of Object.entries(r.components)) sums[k] = (sums[k] ?? 0) + v;
  for (const r of rollouts) {
    stopReasons[r.stop_reason] = (stopReasons[r.stop_reason] ?? 0) + 1;
    completionTokens += r.completion_tokens;
    toolCalls += r.tool_calls;
    promptTokens += r.prompt_tokens ?? 0;
    const lag = trainerPolicyVersion - r.policy_version;
    staleness += lag;
    stalenessHistogram[String(lag)] = (stalenessHistogram[String(lag)] ?? 0) + 1;
    add(toolsUsed, r.tools_used);
    add(shellCommands, r.commands);
    if (r.provenance?.image) images.add(r.provenance.image.id);
    const e = r.provenance?.env;
    if (e) envs.set(`${e.id}\0${e.version}\0${e.sha256}`, { id: e.id, version: e.version, sha256: e.sha256 });
    if (r.sandbox) {
      sandbox ??= { containers: 0, container_s: 0, cpu_s: 0 };
      sandbox.containers += r.sandbox.containers;
      sandbox.container_s += r.sandbox.container_s;
      sandbox.cpu_s += r.sandbox.cpu_s;
    }
  }
  const components = Object.fromEntries(Object.keys(sums).sort().map((k) => [k, round(sums[k]! / ns)]));
  const signal = groupSignal(rollouts, limitEnded);
  return {
    meanReward: round(mean),
    rewardStd: round(Math.sqrt(variance)),
    components,
    stopReasons,
    completionTokens,
    toolCalls,
    promptTokens,
    meanStaleness: round(staleness / n),
    stalenessHistogram,
    toolsUsed,
    shellCommands,
    groups: signal.groups.length,
    informativeGroups: signal.informative.length,
    ...(images.size ? { sandboxImageDigests: [...images].sort() } : {}),
    ...(envs.size ? { envModules: [...envs.keys()].sort().map((k) => envs.get(k)!) } : {}),
    ...(sandbox ? { sandbox: { containers: sandbox.containers, container_s: round3(sandbox.container_s), cpu_s: round3(sandbox.cpu_s) } } : {}),
  };
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}

function round(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}
