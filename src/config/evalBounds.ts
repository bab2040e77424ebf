/**
 * The bounds of the in-run eval cadence ([eval] every_steps, k, and `ratchet set --eval-every`) and of one
 * version's sweep. Pure: the schema, the run's overrides (src/contracts/records.ts) and workflow code read them.
 */
/** [eval] every_steps: 0 is off; at most this many steps between sweeps. */
export const EVAL_EVERY_STEPS_MAX = 1_000_000;
/** [eval] k: samples per task of an in-run sweep (pass@k's n). */
export const EVAL_K_MAX = 64;
/** Episodes one policy version's sweep may run (tasks x k): keeps its results far below Temporal's 2 MB payload limit. */
export const MAX_EPISODES_PER_VERSION = 2_000;
