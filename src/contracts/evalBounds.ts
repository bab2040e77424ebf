/**
 * The bounds of the in-run eval cadence ([eval] every_steps, and `ratchet set --eval-every`), apart from
 * src/contracts/eval.ts so the config schema and the run's overrides read them without importing the eval contracts.
 */
/** [eval] every_steps: 0 is off; at most this many steps between sweeps. */
export const EVAL_EVERY_STEPS_MAX = 1_000_000;
/** [eval] k: samples per task of an in-run sweep (pass@k's n). */
export const EVAL_K_MAX = 64;
/** Episodes one policy version's sweep may run (tasks x k): keeps its results far below Temporal's 2 MB payload limit. */
export const MAX_EPISODES_PER_VERSION = 2_000;
