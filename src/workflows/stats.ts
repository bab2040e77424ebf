import type { RolloutSummary } from '../rollouts/trajectory';

/** Small, deterministic statistics over a step's rollouts: safe in workflow code. */
export interface RolloutStats {
  meanReward: number;
  rewardStd: number;
  components: Record<string, number>;
  stopReasons: Record<string, number>;
  completionTokens: number;
  toolCalls: number;
  promptTokens: number;
  meanStaleness: number;
  /** Policy-version lag -> rollouts. */
  stalenessHistogram: Record<string, number>;
  toolsUsed: Record<string, number>;
  shellCommands: Record<string, number>;
}

export function rolloutStats(rollouts: RolloutSummary[], trainerPolicyVersion: number): RolloutStats {
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
  }
  const components = Object.fromEntries(Object.keys(sums).sort().map((k) => [k, round(sums[k]! / ns)]));
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
  };
}

function round(x: number): number {
  return Math.round(x * 1e6) / 1e6;
}

/** A short markdown block for the Web UI (setCurrentDetails). */
export function detailsMarkdown(p: {
  runId: string; step: number; maxSteps: number; status: string; phase: string; policyVersion: number;
  rolloutsDone: number; rolloutsTotal: number; lastReward?: number; lastComponents?: Record<string, number>;
}): string {
  const lines = [
    `**Ratchet run \`${p.runId}\`** — ${p.status}`,
    '',
    `step ${p.step}/${p.maxSteps} · phase ${p.phase} · rollouts ${p.rolloutsDone}/${p.rolloutsTotal} · policy v${p.policyVersion}`,
  ];
  if (p.lastReward !== undefined) {
    const comps = Object.entries(p.lastComponents ?? {}).map(([k, v]) => `${k} ${v.toFixed(3)}`).join(', ');
    lines.push('', `last step mean reward **${p.lastReward.toFixed(3)}**${comps ? ` (${comps})` : ''}`);
  }
  lines.push('', `\`ratchet status ${p.runId}\` · \`ratchet report ${p.runId}\``);
  return lines.join('\n');
}
