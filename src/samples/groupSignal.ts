/**
 * Which rollouts enter a group's baseline, and which groups carry a learning signal (pure; no
 * imports beyond types, so workflow code and activities share it). A group is informative when
 * the rewards of its baseline members are not all alike: only then is any advantage non-zero.
 */
import { UNIFORM_TOL } from './advantages';

/**
 * Episodes the agent loop ended at a limit (turns, tool calls, the context or the episode's token
 * budget) rather than by finishing. Under `[orchestrator] limit_ended = "mask"` they are left out
 * of the loss and of their group's baseline instead of being scored.
 */
export const LIMIT_STOP_REASONS: readonly string[] = ['max_turns', 'max_tool_calls', 'context_length', 'max_tokens'];

export type LimitEnded = 'score' | 'mask';

/** Why a rollout is not in its group's baseline; undefined: it is. */
export function outOfBaseline(stopReason: string, limitEnded: LimitEnded | undefined): 'infrastructure' | 'task_setup' | 'limit_ended' | undefined {
  if (stopReason === 'infra_error') return 'infrastructure';
  if (stopReason === 'setup_error') return 'task_setup';
  if (limitEnded === 'mask' && LIMIT_STOP_REASONS.includes(stopReason)) return 'limit_ended';
  return undefined;
}

/** Rewards of one group's baseline members: informative when at least two differ. */
export function isInformative(rewards: readonly number[]): boolean {
  return rewards.length >= 2 && Math.max(...rewards) - Math.min(...rewards) > UNIFORM_TOL;
}

export interface GroupSignal {
  /** Groups (by group_id) among the rollouts, in first-seen order. */
  groups: string[];
  /** The informative ones, in the same order. */
  informative: string[];
}

/** Groups and informative groups of a step's rollouts (summaries or trajectories: group_id, stop_reason, reward). */
export function groupSignal(rollouts: readonly { group_id: string; stop_reason: string; reward: number }[], limitEnded: LimitEnded | undefined): GroupSignal {
  const rewards = new Map<string, number[]>();
  for (const r of rollouts) {
    const g = rewards.get(r.group_id) ?? [];
    if (!outOfBaseline(r.stop_reason, limitEnded)) g.push(r.reward);
    rewards.set(r.group_id, g);
  }
  const groups = [...rewards.keys()];
  return { groups, informative: groups.filter((g) => isInformative(rewards.get(g)!)) };
}
