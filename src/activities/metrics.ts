import * as path from 'node:path';
import { type ArtifactStore, LocalArtifactStore } from '../artifacts/store';
import { storeFor, withStoreErrors } from '../artifacts/stores';
import type { Logger } from '../shared/logger';
import { StepRecord, type MetricsActivities, type RecordStepInput, type StepSummary } from '../contracts';
import { runKeys } from '../artifacts/keys';
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
        logger.warn({ runId: record.run_id, step: record.step, err: (err as Error).message }, 'TensorBoard sink failed; the step is recorded in metrics.jsonl');
      }
    }
    if (wandb) {
      try {
        const dir = await writeWandbStep({ ...wandb, dir: dirFor(wandb.dir, 'wandb'), runId: record.run_id, step: record.step, scalars });
        logger.info({ runId: record.run_id, step: record.step, dir, mode: wandb.mode }, 'step written to W&B');
      } catch (err) {
        logger.warn({ runId: record.run_id, step: record.step, err: (err as Error).message }, 'W&B sink failed; the step is recorded in metrics.jsonl');
      }
    }
  }

  return {
    /**
     * Writes the step's record, then moves the run's state file forward. One
     * line per completed step: a retried call (same batch) finds its line and
     * leaves the file alone. A crash between the two writes leaves a record
     * without state; the resumed run redoes the step on another batch, and its
     * record replaces the earlier attempt's, which no state ever pointed at.
     */
    async recordStep({ record, state }: RecordStepInput): Promise<StepSummary> {
      return withStoreErrors(async () => {
      const runStore = storeFor(state.artifacts, store);
      const key = runKeys.metrics(record.run_id);
      const existing = (await runStore.read(key))?.toString('utf8') ?? '';
      const lines = existing.split('\n');
      const at = lines.findIndex((l) => parseRecord(l)?.step === record.step);
      const earlier = at >= 0 ? parseRecord(lines[at]!) : undefined;
      if (earlier && batchSha(earlier) !== batchSha(record)) {
        logger.warn({ runId: record.run_id, step: record.step, earlierBatch: batchSha(earlier), batch: batchSha(record) },
          'the step was redone after a crash; its record replaces the earlier attempt\'s');
        lines[at] = JSON.stringify(record);
        // A whole-object put is atomic in both stores (S3 has no append or rename).
        await runStore.put(key, lines.join('\n'));
      } else if (!earlier) {
        // A torn last line (crash mid-append) gets its own line so later ones stay parseable.
        // The whole file is rewritten atomically (S3 has no append), so a crash never leaves half a line.
        const sep = existing && !existing.endsWith('\n') ? '\n' : '';
        await runStore.put(key, `${existing}${sep}${JSON.stringify(record)}\n`);
        await exportStep(record, runStore);
        stepsTotal.inc();
        trainerStepSeconds.observe((record.timing_ms.train_and_save ?? 0) / 1000);
      }
      lastMeanReward.set({ run: record.run_id }, record.mean_reward);
      await runStore.putJson(runKeys.state(record.run_id), state);
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

/** The two fields recordStep compares in a line it wrote before (any JSON line: a torn one is skipped). */
type WrittenLine = { step?: unknown; batch?: { batch?: { sha256?: string } } | null };

function parseRecord(line: string): WrittenLine | undefined {
  if (!line.trim()) return undefined;
  try {
    return JSON.parse(line) as WrittenLine;
  } catch {
    return undefined;
  }
}

/** What a step trained on: the batch's sha256, or undefined for a step that trained on nothing. */
function batchSha(r: WrittenLine): string | undefined {
  return r.batch?.batch?.sha256;
}

/** Reads every step record of a run through the StepRecord schema; a torn line (a crash mid-write) is skipped. */
export async function readStepRecords(store: ArtifactStore, runId: string): Promise<StepRecord[]> {
  const text = (await store.read(runKeys.metrics(runId)))?.toString('utf8') ?? '';
  return text.split('\n').filter((l) => l.trim()).flatMap((l) => {
    let raw: unknown;
    try {
      raw = JSON.parse(l);
    } catch {
      return [];
    }
    return [StepRecord.parse(raw)];
  });
}
