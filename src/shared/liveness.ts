/**
 * The run config's `[liveness]` windows (src/config/schema.ts) and what one
 * activity receives of them. Pure, so workflow code can import it: a run whose
 * stored config predates the section (a replayed or resumed history) gets the defaults.
 */
export const LIVENESS_DEFAULTS = {
  heartbeat_every_s: 10,
  rollout_stall_s: 600,
  trainer_stall_s: 900,
  weight_sync_stall_s: 180,
} as const;

export interface LivenessWindows {
  heartbeat_every_s: number;
  rollout_stall_s: number;
  trainer_stall_s: number;
  weight_sync_stall_s: number;
}

/** What an activity input carries: how often to heartbeat, and how long without progress is a stall. */
export interface ActivityLivenessInput {
  heartbeat_every_s: number;
  stall_s: number;
}

export function livenessOf(config: { liveness?: Partial<LivenessWindows> }): LivenessWindows {
  return { ...LIVENESS_DEFAULTS, ...(config.liveness ?? {}) };
}

export function forActivity(w: LivenessWindows, kind: 'rollout' | 'trainer' | 'weight_sync'): ActivityLivenessInput {
  return { heartbeat_every_s: w.heartbeat_every_s, stall_s: w[`${kind}_stall_s`] };
}
