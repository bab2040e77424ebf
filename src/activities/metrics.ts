import type { ArtifactStore } from '../artifacts/store';
import { storeFor, withStoreErrors } from '../artifacts/stores';
import type { Logger } from '../shared/logger';
import type { StepSummary } from '../workflows/types';
import { runKeys, type RunStateFile } from './config';
import { lastMeanReward, stepsTotal, trainerStepSeconds } from '../metrics';

export interface MetricsDeps {
  store: ArtifactStore;
  logger: Logger;
}

/** One line of runs/<run>/metrics.jsonl: what `ratchet report` plots. */
export interface StepRecord {
  format: 'ratchet.step/v1';
  run_id: string;
  step: number;
  /** Workflow time at the end of the step (ISO). */
  time: string;
  policy_version: number;
  mean_reward: number;
  reward_std: number;
  reward_components: Record<string, number>;
  rollouts: number;
  samples: number;
  dropped: Record<string, number>;
  stop_reasons: Record<string, number>;
  /** Mean policy version lag of the trained samples (trainer version − sample version). */
  mean_staleness: number;
  completion_tokens: number;
  prompt_tokens?: number;
  tool_calls: number;
  tool_calls_by_tool?: Record<string, number>;
  shell_commands?: Record<string, number>;
  /** Policy-version lag of this step's rollouts -> count. */
  staleness_histogram?: Record<string, number>;
  trainer: Record<string, unknown>;
  /** Set when the step trained on nothing (e.g. EmptyBatch: no trainable token), with the cause. */
  error?: { type: string; message: string };
  timing_ms: Record<string, number>;
  batch: unknown;
  checkpoint?: unknown;
  adapter?: unknown;
  weight_sync?: unknown;
}

export interface RecordStepInput {
  record: StepRecord;
  state: RunStateFile;
}

export function createMetricsActivities({ store, logger }: MetricsDeps) {
  return {
    /**
     * Appends the step's record (once: a retried or replayed call finds its line
     * and leaves the file alone) and then moves the run's state file forward.
     * The order matters: a crash in between leaves a record without state, and
     * the resumed run redoes the step and finds the record already written.
     */
    async recordStep({ record, state }: RecordStepInput): Promise<StepSummary> {
      return withStoreErrors(async () => {
      const runStore = storeFor(state.artifacts, store);
      const existing = (await runStore.read(runKeys.metrics(record.run_id)))?.toString('utf8') ?? '';
      const already = existing.split('\n').some((l) => {
        if (!l.trim()) return false;
        try {
          return (JSON.parse(l) as { step?: number }).step === record.step;
        } catch {
          return false;
        }
      });
      if (!already) {
        // A torn last line (crash mid-append) gets its own line so later ones stay parseable.
        // The whole file is rewritten atomically (S3 has no append), so a crash never leaves half a line.
        const sep = existing && !existing.endsWith('\n') ? '\n' : '';
        await runStore.put(runKeys.metrics(record.run_id), `${existing}${sep}${JSON.stringify(record)}\n`);
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
  };
}

/** Reads every step record of a run (the CLI's report and follow use this). */
export async function readStepRecords(store: ArtifactStore, runId: string): Promise<StepRecord[]> {
  const text = (await store.read(runKeys.metrics(runId)))?.toString('utf8') ?? '';
  return text.split('\n').filter((l) => l.trim()).flatMap((l) => {
    try {
      return [JSON.parse(l) as StepRecord];
    } catch {
      return [];
    }
  });
}
