/**
 * Everything that crosses a process or history boundary in Ratchet, by subject:
 * - run.ts: TrainRun's input, result, progress and resume state
 * - step.ts: a step's sampled tasks, StepRollouts' input and result, rollout statistics
 * - records.ts: what a run stores and reads back (metrics.jsonl's step record, state.json)
 * - activities.ts: the activities workflows call (the main worker's, the rollout worker's)
 * - eval.ts: EvalSweep's input, plan, episodes and result, and its activities
 * - rollout.ts: the rollout activity's input, one schema: workflows send its input type, the activity parses it
 * - journal.ts: a rollout's turn journal (each turn as it happens), read back by its retry
 * - trajectory.ts: one rollout as the rollout worker saves it and the batch builder reads it, and its RolloutSummary
 * - trainer.ts: the Python trainer's activities
 * - sft.ts: SftRun's activities (its data frozen into the store, a step's batch)
 * - outage.ts: a store or disk outage handed to the OutageWait workflow
 * docs/contracts.md names the other side of each (the Python trainer's where there is one).
 */
export * from './activities';
export * from './eval';
export * from './journal';
export * from './outage';
export * from './records';
export * from './rollout';
export * from './run';
export * from './sft';
export * from './step';
export * from './trainer';
export * from './trajectory';
export * from './chunks';
