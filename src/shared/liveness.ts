/**
 * The run config's `[liveness]` windows (src/config/schema.ts) and what one
 * activity receives of them. Pure, so workflow code can import it: a run whose
 * stored config predates the section (a replayed or resumed history) gets the defaults.
 * Also what long work sees of its activity's liveness (`Liveness`; src/activities/liveness.ts
 * implements it), so code below the activities can report progress without importing them.
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

/** What the work inside an activity sees: src/activities/liveness.ts's withLiveness hands it one. */
export interface Liveness {
  /** Record progress; `details` replace what the next heartbeats carry. */
  progress(details?: Record<string, unknown>): void;
  /** Aborts when the activity is cancelled, or one heartbeat timeout after a stall. */
  readonly signal: AbortSignal;
  /** Whether the watchdog has given up on this attempt. */
  readonly stalled: boolean;
}
