/**
 * The artifact key layout: every key a run writes into (or reads from) its
 * artifact store, in one place. A key is relative to the store's root (a local
 * directory, or an S3 bucket + prefix). Stored runs and recorded histories hold
 * these strings, so a key never changes once a release has written it; the
 * layout is described in docs/contracts.md ("Artifact layout").
 *
 * runs/<run>/
 *   config.json                                  the parsed run config (openRun)
 *   state.json                                   the last completed step: a copy of the winning state record (recordStep, monotonic)
 *   metrics.jsonl                                one step record a line (runs written before 0.6; read, never written)
 *   records/steps/<step>-<sha16>.json            one step record, content-keyed, created once (0.6 on)
 *   records/states/<epoch>-<completed step>-<sha16>.json  one run state, content-keyed, created once
 *   records/fallbacks/<epoch>-<sha16>.json       a checkpoint fallback: the bad checkpoint, the one used, the steps retrained
 *   records/reverts/<epoch>-<sha16>.json         `ratchet fallback revert`: a fallback undone, who and why
 *   records/releases/<time>.json                 `ratchet release`: the trainer and adapters an ended run still held, freed by hand
 *   records/retention/<time>-<sha16>.json        [artifacts.retention] / `ratchet gc`: what was deleted, the checkpoints pruned
 *   report.html                                  `ratchet report`'s default output
 *   tensorboard/  wandb/                         local metric sinks (on an S3 store: under this host's artifacts dir)
 *   steps/<step>/rollouts/<group>/<i>-<sha16>.json  a trajectory, keyed by its content (older runs: <i>.json)
 *   steps/<step>/rollouts/<group>/<i>.journal/turn-<k>-<attempt>.json  a rollout's turn journal: one part a turn
 *   steps/<step>/rollouts/<group>/<i>.journal/diverged-<attempt>-<k>.json  a journaled turn whose replay diverged
 *   steps/<step>/rollouts/summaries[-part-<p>].json  the step's rollout summaries
 *   steps/<step>/manifest-<sha16>.json           the step manifest: tasks and rollout settings (writeStepManifest)
 *   steps/<step>/rollouts/chunks/<start>-<sha16>.json  one chunk's rollout summaries (rolloutChunk)
 *   steps/<step>/rollouts/summaries-shard-<k>.json   one shard's rollout summaries (RolloutShard)
 *   steps/<step>/rollouts/summaries-r<round>[-shard-<k>|-part-<p>].json  a refill round's (difficulty filtering)
 *   steps/<step>/rollouts/filtered-{all,kept}-<sha16>.json  every round's summaries / the informative groups' only
 *   task-pool/<step>-<sha16>.json                the pass-rate pool after a step: each task's rollouts and passes
 *   steps/<step>/batch.safetensors, batch.json   the training batch and its manifest
 *   sft/data.jsonl                               an SftRun's trajectories, checked and frozen when it opens
 *   checkpoints/step-<n>[-<batch sha256, 16 hex>]/   written by the Python trainer
 *   checkpoints/step-<n>[-<16 hex>].attempt-<id>/   the same step, saved by a save that lost the race for it
 *   evals/<version>/<taskset hash>.json          an EvalSweep result
 *   evals/trajectories/<group>/<i>-<sha16>.json  an eval episode's trajectory (older runs: <i>.json)
 *   evals/trajectories/<group>/<i>.journal/...   an eval episode's turn journal
 *
 * Pure (no Node built-ins): workflow code may import it.
 */
import { EVAL_STEP } from '../shared/steps';

/** The folder every run's keys live under. */
export const RUNS_PREFIX = 'runs';

const run = (runId: string): string => `${RUNS_PREFIX}/${runId}`;
const stepDir = (runId: string, step: number): string => `${run(runId)}/steps/${step}`;
const rolloutsDir = (runId: string, step: number): string => `${stepDir(runId, step)}/rollouts`;
/** Where a rollout's (or an eval episode's) own objects live: its group's folder. */
const groupDir = (runId: string, step: number, groupId: string): string =>
  step === EVAL_STEP ? `${run(runId)}/evals/trajectories/${groupId}` : `${rolloutsDir(runId, step)}/${groupId}`;
const journalDir = (runId: string, step: number, groupId: string, rolloutIndex: number): string =>
  `${groupDir(runId, step, groupId)}/${rolloutIndex}.journal`;

export const runKeys = {
  /** Everything of one run (a prefix, or a directory on a local store). */
  run,
  config: (runId: string): string => `${run(runId)}/config.json`,
  state: (runId: string): string => `${run(runId)}/state.json`,
  metrics: (runId: string): string => `${run(runId)}/metrics.jsonl`,
  report: (runId: string): string => `${run(runId)}/report.html`,
  /** Every appended record of the run: step records, run states, checkpoint fallbacks (src/artifacts/runRecords.ts). */
  records: (runId: string): string => `${run(runId)}/records`,
  /**
   * One step record, keyed by its step and content (first 16 hex of its sha256) and created only where absent:
   * a retried recordStep writes the same bytes to the same key; a redone step (another batch, or retrained after a
   * checkpoint fallback) gets a key of its own. Readers pick the winner per step (runRecords.ts), never the last write.
   */
  stepRecord: (runId: string, step: number, contentSha256: string): string =>
    `${run(runId)}/records/steps/${step}-${contentSha256.slice(0, 16)}.json`,
  /** One run state (RunStateFile), keyed like a step record; the winner is the highest (epoch, completed step). */
  stateRecord: (runId: string, epoch: number, completedStep: number, contentSha256: string): string =>
    `${run(runId)}/records/states/${epoch}-${completedStep}-${contentSha256.slice(0, 16)}.json`,
  /** `ratchet release <run>`: who released what the ended run held, and why (time: ISO, ':' as '-'). */
  releaseRecord: (runId: string, time: string): string => `${run(runId)}/records/releases/${time.replaceAll(':', '-')}.json`,
  /** A retention record (src/records/retention.ts): what one application of [artifacts.retention] or `ratchet gc` deleted. */
  retentionRecord: (runId: string, time: string, contentSha256: string): string =>
    `${run(runId)}/records/retention/${time.replaceAll(':', '-')}-${contentSha256.slice(0, 16)}.json`,
  /** A checkpoint fallback record (epoch = the epoch it starts). */
  fallbackRecord: (runId: string, epoch: number, contentSha256: string): string =>
    `${run(runId)}/records/fallbacks/${epoch}-${contentSha256.slice(0, 16)}.json`,
  /** A fallback revert record (epoch = the epoch it starts). */
  revertRecord: (runId: string, epoch: number, contentSha256: string): string =>
    `${run(runId)}/records/reverts/${epoch}-${contentSha256.slice(0, 16)}.json`,
  /** A local metrics sink's directory (TensorBoard event files, W&B's offline run). */
  sink: (runId: string, sink: 'tensorboard' | 'wandb' | (string & {})): string => `${run(runId)}/${sink}`,

  /** A step's folder. */
  step: stepDir,
  /** A training step's trajectories and rollout summaries. */
  rollouts: rolloutsDir,
  /** The directory of one group's trajectories (and their turn journals): every attempt of its rollouts writes there. */
  rolloutGroup: (runId: string, step: number, groupId: string): string => groupDir(runId, step, groupId),
  /**
   * A trajectory: a training step's, or an eval episode's (step EVAL_STEP), kept apart from step 0's.
   * Written under `<i>-<first 16 hex of its sha256>.json` (content-keyed): every attempt of a rollout
   * writes its own object, so a stale attempt (a host cut off from Temporal but not from the store)
   * that finishes after the retry can never overwrite the object the recorded summary refers to.
   * Without a sha256: `<i>.json`, the key runs before content keys wrote (their refs still read).
   */
  trajectory: (runId: string, step: number, groupId: string, rolloutIndex: number, contentSha256?: string): string => {
    const name = `${rolloutIndex}${contentSha256 ? `-${contentSha256.slice(0, 16)}` : ''}.json`;
    return `${groupDir(runId, step, groupId)}/${name}`;
  },
  /**
   * A rollout's turn journal (src/rollouts/journal.ts): every part below it, listed when a retry of the
   * rollout starts. Keyed by the rollout's identity (run, step, group, index), never by an attempt.
   */
  rolloutJournal: journalDir,
  /**
   * One turn (0-based `turn`, zero-padded so parts list in turn order) as attempt `attempt` recorded it.
   * The attempt id keeps a stale attempt's part and its retry's apart: neither overwrites the other.
   */
  rolloutJournalTurn: (runId: string, step: number, groupId: string, rolloutIndex: number, turn: number, attempt: string): string =>
    `${journalDir(runId, step, groupId, rolloutIndex)}/turn-${String(turn).padStart(4, '0')}-${attempt}.json`,
  /** Attempt `attempt` replayed turn `turn` and got another tool output: that turn's part is not replayed again. */
  rolloutJournalDiverged: (runId: string, step: number, groupId: string, rolloutIndex: number, attempt: string, turn: number): string =>
    `${journalDir(runId, step, groupId, rolloutIndex)}/diverged-${attempt}-${turn}.json`,
  /** A step's rollout summaries as one artifact, or one part of them; `round` > 0: a refill round's (difficulty filtering). */
  rolloutSummaries: (runId: string, step: number, part?: number, round?: number): string =>
    `${rolloutsDir(runId, step)}/summaries${round ? `-r${round}` : ''}${part === undefined ? '' : `-part-${part}`}.json`,
  /**
   * The step manifest (src/contracts/manifest.ts), keyed by its content: a re-sampled step (another
   * policy version after a restart) writes its own object and never changes one a chunk reads.
   */
  stepManifest: (runId: string, step: number, contentSha256: string): string => `${stepDir(runId, step)}/manifest-${contentSha256.slice(0, 16)}.json`,
  /** One chunk's rollout summaries (rollouts from `start`), keyed by content like a trajectory. */
  rolloutChunk: (runId: string, step: number, start: number, contentSha256: string): string =>
    `${rolloutsDir(runId, step)}/chunks/${start}-${contentSha256.slice(0, 16)}.json`,
  /** One shard's rollout summaries, joined from its chunks'. */
  rolloutSummariesShard: (runId: string, step: number, shard: number, round?: number): string =>
    `${rolloutsDir(runId, step)}/summaries${round ? `-r${round}` : ''}-shard-${shard}.json`,
  /**
   * Difficulty filtering: the summaries of every round of a step (`all`), or of its informative groups
   * only (`kept`, what the batch is built from); keyed by content, as each round writes them anew.
   */
  rolloutSummariesFiltered: (runId: string, step: number, which: 'all' | 'kept', contentSha256: string): string =>
    `${rolloutsDir(runId, step)}/filtered-${which}-${contentSha256.slice(0, 16)}.json`,
  /** The run's pass-rate pool after a step (src/samples/taskPool.ts), keyed by content: each step writes its own. */
  taskPool: (runId: string, step: number, contentSha256: string): string => `${run(runId)}/task-pool/${step}-${contentSha256.slice(0, 16)}.json`,
  /** The training batch of a step and its manifest. */
  batch: (runId: string, step: number): { batch: string; manifest: string } =>
    ({ batch: `${stepDir(runId, step)}/batch.safetensors`, manifest: `${stepDir(runId, step)}/batch.json` }),

  /** An SftRun's trajectories: its data files, checked and joined once when it opens, then read by reference. */
  sftData: (runId: string): string => `${run(runId)}/sft/data.jsonl`,

  /** Every checkpoint of the run (the Python trainer writes them: trainer/ratchet_trainer/core/checkpoint.py). */
  checkpoints: (runId: string): string => `${run(runId)}/checkpoints`,
  /**
   * One checkpoint: `step-<n>-<first 16 hex of the batch's sha256>`, or `step-<n>` without a batch
   * (ledgers from before batches were recorded). Python's `checkpoint_key` builds the same string.
   */
  checkpoint: (runId: string, step: number, batchSha256?: string): string =>
    `${run(runId)}/checkpoints/${batchSha256 ? `step-${step}-${batchSha256.slice(0, 16)}` : `step-${step}`}`,

  /**
   * Where a `trainer.save` that met another save of the same step (a partitioned trainer's stale save,
   * or its replacement's) commits its checkpoint when the other's objects, with other bytes, hold
   * runKeys.checkpoint: `<checkpoint>.attempt-<id>`. Every checkpoint upload is conditional
   * (If-None-Match: *), so neither save replaces an object the other wrote; the ref the save returns
   * (recorded by the workflow) names the winner. Python's `checkpoint_attempt_key` builds the same string.
   */
  checkpointAttempt: (runId: string, step: number, batchSha256: string | undefined, attempt: string): string =>
    `${runKeys.checkpoint(runId, step, batchSha256)}.attempt-${attempt}`,

  /** The run's eval results and eval trajectories. */
  evals: (runId: string): string => `${run(runId)}/evals`,
  /** One EvalSweep result: a policy version on a task set (its content hash). */
  evalResult: (runId: string, version: number, tasksetHash: string): string => `${run(runId)}/evals/${version}/${tasksetHash}.json`,
};

/** Whether a key is an eval result (runKeys.evalResult), not an eval trajectory or anything else. */
export function isEvalResultKey(key: string): boolean {
  return /^runs\/[^/]+\/evals\/[^/]+\/[^/]+\.json$/.test(key) && !key.includes('/trajectories/');
}
