import type { RolloutSummary } from '../rollouts/trajectory';

/** Small, deterministic statistics over a step's rollouts: safe in workflow code. */
export interface RolloutStats {
  meanReward: number;
  rewardStd: number;
  components: Record<string, number>;
  stopReasons: Record<string, number>;
  completionTokens: number;
  toolCalls: number;
  meanStaleness: number;
}

export function rolloutStats(rollouts: RolloutSummary[], trainerPolicyVersion: number): RolloutStats {
  const n = rollouts.length || 1;
  const mean = rollouts.reduce((a, r) => a + r.reward, 0) / n;
  const variance = rollouts.reduce((a, r) => a + (r.reward - mean) ** 2, 0) / n;
  const sums: Record<string, number> = {};
  const stopReasons: Record<string, number> = {};
  let completionTokens = 0;
  let toolCalls = 0;
  let staleness = 0;
  for (const r of rollouts) {
    for (const [k, v] of Object.entries(r.components)) sums[k] = (sums[k] ?? 0) + v;
    stopReasons[r.stop_reason] = (stopReasons[r.stop_reason] ?? 0) + 1;
    completionTokens += r.completion_tokens;
    toolCalls += r.tool_calls;
    staleness += trainerPolicyVersion - r.policy_version;
  }
  const components = Object.fromEntries(Object.keys(sums).sort().map((k) => [k, round(sums[k]! / n)]));
  return {
    meanReward: round(mean),
    rewardStd: round(Math.sqrt(variance)),
    components,
    stopReasons,
    completionTokens,
    toolCalls,
    meanStaleness: round(staleness / n),
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
