/** The workflow bundle for the `ratchet` task queue: the exported names are the workflow types. */
export { TrainRun } from './trainRun';
export { SftRun } from './sftRun';
export { StepRollouts } from './stepRollouts';
export { EvalSweep } from './evalSweep';
export { OutageWait } from './outageWait';
export { InferenceWait } from './inferenceWait';
export { RolloutShard } from './rolloutShard';
export { RolloutWorkersWait } from './rolloutWorkersWait';
export { ReleaseRun } from './releaseRun';
