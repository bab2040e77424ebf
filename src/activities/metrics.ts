import * as path from 'node:path';
import { type ArtifactStore, LocalArtifactStore } from '../artifacts/store';
import { storeFor, withStoreErrors } from '../artifacts/stores';
import type { Logger } from '../shared/logger';
import { StepRecord, type MetricsActivities, type RecordStepInput, type StepSummary } from '../contracts';
import { runKeys } from '../artifacts/keys';
import { appendState, appendStepRecord } from '../records/runRecords';
import { retainAfterStep } from '../records/retention';
import { lastMeanReward, stepsTotal, trainerStepSeconds } from '../metrics';
import { RunConfig } from '../config/schema';
import { paths, REPO_ROOT } from '../shared/paths';
import { stepScalars } from '../metrics/sinks/scalars';
import { writeTensorBoardStep } from '../metrics/sinks/tensorboard';
import { writeWandbStep } from '../metrics/sinks/wandb';

export interface MetricsDeps {
  store: ArtifactStore;
  logger: Logger;
}

export function createMetricsActivities({ store, logger }: MetricsDeps) {
  /**
   * The run's configured sinks (the [metrics] section of its stored config). A
   * sink that fails is logged, never fatal: the step is recorded either way.
   */
  async function exportStep(record: StepRecord, runStore: ArtifactStore): Promise<void> {
    const ref = await runStore.exists(runKeys.config(record.run_id));
    if (!ref) return;
    const parsed = RunConfig.shape.metrics.safeParse((await runStore.getJson<{ metrics?: unknown }>(ref)).metrics ?? {});
    if (!parsed.success) return;
    const { tensorboard: tb, wandb } = parsed.data;
    const dirFor = (configured: string | undefined, sink: string): string => (configured
      ? path.join(path.isAbsolute(configured) ? configured : path.join(REPO_ROOT, configured), record.run_id)
      // Sinks write local files: beside the run's artifacts on a local store, under this host's artifacts dir for S3.
      : runStore instanceof LocalArtifactStore
        ? runStore.localPath(runKeys.sink(record.run_id, sink))
        : path.join(paths.artifacts(), runKeys.sink(record.run_id, sink)));
    const scalars = stepScalars(record);
    if (tb) {
      try {
        const file = await writeTensorBoardStep(dirFor(tb.dir, 'tensorboard'), record.step, Date.parse(record.time) / 1000, scalars);
        logger.info({ runId: record.run_id, step: record.step, file }, 'step written to TensorBoard');
      } catch (err) {
        logger.warn({ runId: record.run_id, step: record.step, err: (err as Error).message }, 'TensorBoard sink failed; the step is recorded in the run\'s records');
      }
    }
    if (wandb) {
      try {
        const dir = await writeWandbStep({ ...wandb, dir: dirFor(wandb.dir, 'wandb'), runId: record.run_id, step: record.step, scalars });
        logger.info({ runId: record.run_id, step: record.step, dir, mode: wandb.mode }, 'step written to W&B');
      } catch (err) {
        logger.warn({ runId: record.run_id, step: record.step, err: (err as Error).message }, 'W&B sink failed; the step is recorded in the run\'s records');
      }
    }
  }

  return {
    /**
     * Appends the step's record, then the run's new state (src/records/runRecords.ts): each an object of
     * its own, created only where absent, so nothing is read-modified-written and a stale attempt cannot
     * roll the state back or replace a newer record. A retried call (same record) finds its own object;
     * a step redone after a crash (another batch) adds a record that wins by its later time.
     */
    async recordStep({ record, state }: RecordStepInput): Promise<StepSummary> {
      return withStoreErrors(async () => {
      const runStore = storeFor(state.artifacts, store);
      if (await appendStepRecord(runStore, record)) {
        await exportStep(record, runStore);
        stepsTotal.inc();
        trainerStepSeconds.observe((record.timing_ms.train_and_save ?? 0) / 1000);
      }
      await appendState(runStore, state);
      // [artifacts.retention]: the step is recorded, so its journals and the checkpoints it supersedes can go.
      // Best effort: what a failure leaves behind goes at the next step, or by `ratchet gc`.
      await retainAfterStep(runStore, state, new Date().toISOString())
        .then((r) => r && r.deleted.keys && logger.info({ runId: record.run_id, step: record.step, deleted: r.deleted, pruned: r.pruned.map((p) => p.dir) }, 'retention: deleted what the run no longer needs'))
        .catch((err: unknown) => logger.warn({ runId: record.run_id, step: record.step, err: String(err) }, 'retention failed; the next step or `ratchet gc` deletes what it left'));
      lastMeanReward.set({ run: record.run_id }, record.mean_reward);
      logger.info({ runId: record.run_id, step: record.step, meanReward: record.mean_reward, components: record.reward_components, policyVersion: record.policy_version }, 'step recorded');
      return {
        step: record.step,
        meanReward: record.mean_reward,
        components: record.reward_components,
        rollouts: record.rollouts,
        dropped: Object.values(record.dropped).reduce((a, b) => a + b, 0),
        policyVersion: record.policy_version,
      };
      });
    },
  } satisfies MetricsActivities;
}

/** The run's winning step records, by step (appended records, or metrics.jsonl of a run from before 0.6). */
export { readStepRecords } from '../records/runRecords';
