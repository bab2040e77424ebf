/**
 * The step an EvalSweep episode carries: not a training step, so its sandbox
 * labels, seeds and trajectory keys stay apart from step 0's. Pure, so workflow
 * code can import it.
 */
export const EVAL_STEP = -1;
