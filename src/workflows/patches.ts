/**
 * Every behaviour change of workflow code, behind `patched(id)`: a run started on older
 * code replays its history the old way and takes the new path only where its history has
 * not yet been (docs/upgrades.md).
 *
 * Support window: a release upgrades in place runs started on the previous two releases
 * (0.8 takes runs from 0.6 and 0.7; versioned deployments, which pin each run to its
 * build, need no window). A patch of a release outside the window has had its old branch
 * removed and is kept one release as `deprecatePatch(id)` (DEPRECATED_PATCHES), which
 * replays histories with and without its marker; the release after removes the call. The
 * recorded histories of releases outside the window leave test/fixtures/histories at the
 * same time. test/unit/workflows/patches.test.ts holds the code to this; the replay test stays
 * the judge. Ids are never reused.
 */
/** The oldest release whose runs this code upgrades in place (the support window above). */
export const OLDEST_UPGRADABLE_RELEASE = '0.6.0';

export const PATCHES = {
  /**
   * Worker Versioning (docs/upgrades.md): TrainRun continues as new with initialVersioningBehavior
   * AUTO_UPGRADE, so the next execution starts on the deployment's current build, and it continues as
   * new at the first step boundary after the current build changed (targetWorkerDeploymentVersionChanged).
   * Each execution stays PINNED to its build in between; step children inherit the parent's build.
   */
  upgradeOnContinueAsNew: 'v0.6-upgrade-on-continue-as-new',
  /**
   * A trainer.load that fails on the run's newest checkpoint (ArtifactError: a file does not match its
   * manifest; CheckpointError) calls fallBackToVerifiedCheckpoint: if the checkpoint is corrupt, the run
   * records a fallback to the newest checkpoint that verifies and continues as new from it, in a new
   * epoch, so the steps after it are trained again once each (src/records/fallback.ts). Checked only
   * when such a load fails: histories without one are unchanged.
   */
  checkpointFallback: 'v0.6-checkpoint-fallback',
  /**
   * Inference replicas are a pool: a weight sync that reaches inference.sync_quorum replicas (or inference
   * hosts, each synced on its own queue and all awaited) lets the step go on; the rest are recorded as
   * behind (the step record's weight_sync.behind) and get no rollouts until a later sync loads the version.
   */
  replicaQuorum: 'v0.6-replica-quorum',
  /**
   * [model] init_from (a warm start): the run's version 0 is the origin run's adapter, not the base model.
   * trainer.load gets it as its initial adapter wherever the run has no checkpoint of its own, version 0 is
   * served as `<run>/policy-v0` before the first rollout, and kept while rollouts may use it. Checked only
   * for a config with init_from: histories without one are unchanged.
   */
  initFrom: 'v0.7-init-from',
  /**
   * Budgets (the cost ledger, docs/operations.md): at a step boundary, a run whose cost reached a budget
   * ([budget], or raised with `ratchet set --budget`) waits with status budget-exhausted until one is raised.
   * Checked only when the run has a budget: runs without one make no new command.
   */
  runBudgets: 'v0.7-run-budgets',
  /**
   * The in-run eval cadence (issue 30; src/workflows/evalCadence.ts): after every N-th step that saved a
   * checkpoint ([eval] every_steps, or `ratchet set --eval-every N`), TrainRun names an EvalSweep in the
   * step record and starts it as an abandoned child, below training by priority. Checked only at such a
   * step: a run without a cadence (every history before 0.7) never reaches patched().
   */
  evalCadence: 'v0.7-eval-cadence',
  /**
   * A chunked step reports its progress at most ~8 times (every 1/8 of its chunks, and once at the end):
   * before, every chunk that finished after the last one had started signalled the parent, so a step of
   * one window (all chunks started at once) sent one signal per chunk to TrainRun (issue 24, profiled on
   * PostgreSQL). RolloutShard and StepRollouts' own chunks alike.
   */
  chunkProgressStride: 'v0.7-chunk-progress-stride',
  /** StepRollouts starts all its RolloutShard children in one workflow task, not one task (and round trip) per shard. */
  shardsStartTogether: 'v0.7-shards-start-together',
  /**
   * trainer.announce took the trainer from a run whose workflow no longer runs (terminated: it never
   * released it; issue 42) and names it (freed_run_id): the announcing run unloads that run's adapters
   * from inference. Checked only when an announce names one: histories before it never reach patched().
   */
  endedRunAdaptersUnloaded: 'v0.8-ended-run-adapters-unloaded',
  /**
   * Online difficulty filtering ([orchestrator.difficulty_filter] enabled): after a step's rollouts, TrainRun
   * asks filterGroups how many groups are informative (rewards not all alike) and, while fewer than
   * batch_size and refill rounds remain, starts another StepRollouts child (`-rollouts-r<round>`) for the
   * missing groups; the batch is built from the informative groups only. Checked only when the filter is
   * on: runs without it (every history before it) make no new command.
   */
  difficultyFilter: 'v0.8-difficulty-filter',
  /**
   * Pass-rate pools ([orchestrator.pass_rate_pool] enabled): after a step's rollouts TrainRun calls
   * updateTaskPool, names the pool in the step record and the run state, carries it across continue-as-new,
   * and passes it to the next steps' task sampling. Checked only when pools are on.
   */
  passRatePools: 'v0.8-pass-rate-pools',
  /**
   * A chunk call that ended in a timeout (start-to-close, heartbeat) keeps the rollouts its last heartbeat
   * named, and every call after a failed one lists the store for rollouts an earlier call finished (issue 39).
   */
  chunkTimeoutKeepsDone: 'v0.8-chunk-timeout-keeps-done',
  /**
   * A chunk that failed with RolloutHostUnhealthy (its worker took itself out of service) is called again
   * without using a round; the rollout-worker watchdog names the hosts out of service
   * (waiting-for-healthy-rollout-hosts) when no worker polls (issue 39).
   */
  rolloutHostHealth: 'v0.8-rollout-host-health',
  /**
   * A chunk that failed with InferenceUnavailable (its rollouts' inference server stopped answering) shows
   * waiting-for-inference at once and puts inference back without using a round (issue 39).
   */
  chunkInferenceUnavailable: 'v0.8-chunk-inference-unavailable',
  /**
   * The rollout-worker watchdog: after a few checks that found no worker, the wait goes to a
   * RolloutWorkersWait child that continues as new; while workers run but no chunk finishes, its
   * checks back off (issue 39).
   */
  rolloutWorkersWaitChild: 'v0.8-rollout-workers-wait-child',
  /** The last step's (or a stopping run's) inference wait goes to an InferenceWait child that continues as new (issue 39). */
  lastStepInferenceWaitChild: 'v0.8-last-step-inference-wait-child',
  /**
   * A trainer that lost its process mid-step (a timeout: the process vanished, a partition, a reboot) is
   * infrastructure, never the batch's doing: two such losses no longer record TrainerKilled, the step is
   * trained again on a replacement (issue 39).
   */
  trainerLossNotPoison: 'v0.8-trainer-loss-not-poison',
  /**
   * TrainerFault (an error the trainer has no type for; it fenced itself): the run re-announces and retries
   * on the replacement instead of failing; a batch whose trainer.step fails with the same error class on two
   * different trainer processes is recorded as PoisonBatch and skipped (issue 39).
   */
  trainerProcessFault: 'v0.8-trainer-process-fault',
  /**
   * After a checkpoint fallback (epoch > 0), task sampling gets the epoch and the group ids carry it, so a
   * retrained step's trajectories and turn journals are keyed apart from the voided epoch's: its rollouts are
   * sampled afresh (issue 39). Checked only in an epoch above 0: histories without a fallback are unchanged.
   */
  epochGroupIds: 'v0.8-epoch-group-ids',
  /**
   * trainer.mode = "full": weight sync reloads the checkpoint's full weights into every replica (the base
   * model's at version 0, synced before the first rollout too), and rollouts ask for inference.served_model
   * at every version (issue 41). Checked only in full-mode runs: LoRA histories are unchanged.
   */
  fullWeightSync: 'v0.8-full-weight-sync',
  /**
   * A run that holds no trainer announces and loads one while a step's rollouts run, not after them: the model's
   * load (14 s of the main job's first step on the CPU) overlaps the rollouts (issue 38). Checked only when a step
   * starts without a trainer: histories from then on announce before the step's rollouts finish.
   */
  trainerLoadedDuringRollouts: 'v0.8-trainer-loaded-during-rollouts',
} as const;

/**
 * Patches whose old branches are gone: workflow code calls `deprecatePatch(id)` where it
 * called `patched(id)`, so histories recorded with or without the marker replay. Removed
 * with their calls in 0.9. Those of releases before the support window (0.5 and older;
 * `step-rollouts-summaries-by-ref` shipped in 0.5 without a version in its id), and the
 * three 0.6 patches whose old branch was the pre-0.6 per-rollout fan-out, which no shipped
 * 0.6 or 0.7 config took (docs/upgrades.md, "The per-rollout fan-out").
 *
 * Gone with the per-rollout window itself (no call left; ids not to be reused):
 * v0.4-disk-wait-status-held, v0.5-rollout-store-wait, v0.5-step-inference-wait,
 * v0.5-rollout-workers-watch, step-rollouts-summaries-by-ref, v0.5-step-summaries-store-wait.
 */
export const DEPRECATED_PATCHES = {
  /** A trainer whose lease another run took (TrainerNotLoaded/TrainerBusy) is replaced like a dead one. */
  trainerLease: 'v0.2-trainer-lease',
  /** After continue-as-new, the trainer the run held is loaded again without announcing. */
  trainerKeptAcrossContinueAsNew: 'v0.2-trainer-kept-across-continue-as-new',
  /** NonFiniteGradient / StepOutOfMemory: the step is recorded with its error and skipped. */
  stepFaultsSkipped: 'v0.2-step-faults-skipped',
  /** StepPartition (the trainer's ranks could not plan the batch's passes alike): recorded and skipped like the faults above. */
  stepPartitionSkipped: 'v0.5-step-partition-skipped',
  /** At the end of a run (completed, stopped, failed, cancelled): release the trainer, unload its adapters. */
  releaseAtEnd: 'v0.2-release-at-end',
  /** A long inference outage continues as new instead of growing one history. */
  inferenceWaitContinueAsNew: 'v0.2-inference-wait-continue-as-new',
  /** A pause survives continue-as-new. */
  pauseCarried: 'v0.2-pause-carried',
  /** StoreUnavailable: the run waits (waiting-for-store) and calls again, instead of failing. */
  storeWait: 'v0.3-store-wait',
  /** DiskFull: the run waits (waiting-for-disk) and calls again, instead of failing. */
  diskWait: 'v0.4-disk-wait',
  /** A store/disk wait that outlasts a few tries hands the call to an OutageWait child that continues as new. */
  outageHandoff: 'v0.4-outage-handoff',
  /** EvalSweep syncs adapters on each inference host's own queue (inference.sync_task_queues), as TrainRun does. */
  evalSyncHosts: 'v0.3-eval-sync-hosts',
  /** TrainRun records its [artifacts] settings in its memo, so `ratchet eval` finds the run's store. */
  artifactsMemo: 'v0.3-artifacts-memo',
  /** A step whose batch kills (or hangs) its trainer twice in trainer.step is recorded as TrainerKilled and skipped. */
  trainerKilledStepFault: 'v0.5-trainer-killed-step-fault',
  /**
   * A step's fan-out at scale (issue 24): TrainRun writes the step manifest (tasks and rollout settings,
   * by reference) with writeStepManifest instead of sampleTasks' inline tasks.
   */
  stepManifest: 'v0.6-step-manifest',
  /** StepRollouts runs the manifest in chunks and shards (src/workflows/stepRollouts.ts, rolloutShard.ts). */
  stepChunks: 'v0.6-step-chunks',
  /** Each per-rollout activity named every inference replica (inferenceBaseUrls); chunks always have. */
  rolloutReplicaPool: 'v0.6-rollout-replica-pool',
} as const;
// Not a patch: the priority and fairness keys on rollout, eval and trainer activities and on the
// StepRollouts child (src/shared/fairness.ts). Replay compares an activity's id and type, not its
// options, so histories recorded without the keys replay unchanged (test/unit/workflows/replay.test.ts).
