import { readFile } from 'node:fs/promises';
import { ApplicationFailure } from '@temporalio/common';
import { runKeys } from '../artifacts/keys';
import type { ArtifactStore } from '../artifacts/store';
import { storeFor, storeForRef, withStoreErrors } from '../artifacts/stores';
import type { BuildBatchOutput } from '../contracts/activities';
import type { BuildSftBatchInput, PrepareSftDataInput, PrepareSftDataResult, SftActivities } from '../contracts/sft';
import type { Trajectory } from '../contracts/trajectory';
import { writeSafetensors } from '../samples/safetensors';
import { loadModelTokenizer, ModelDirError, type ModelTokenizer } from '../samples/tokenizer';
import { componentLogger, type Logger } from '../shared/logger';
import { buildSftBatch, sftStepIndices } from '../sft/batch';
import { parseSftJsonl, SftDataError, successful, type SftItem } from '../sft/trajectories';

/**
 * SftRun's activities. The data is checked and frozen into the run's store once
 * (runs/<run>/sft/data.jsonl), so editing a data file mid-run never changes what a
 * later or retried step trains on; each step's batch is a seeded choice from it,
 * written at the step's batch keys like TrainRun's. Bad data fails non-retryably
 * (the same input gives the same answer), naming the file and the line.
 */

function fail(type: string, message: string, cause?: Error): never {
  throw ApplicationFailure.create({ type, message, nonRetryable: true, cause });
}

function tokenizer(modelPath: string): ModelTokenizer {
  try {
    return loadModelTokenizer(modelPath);
  } catch (err) {
    if (err instanceof ModelDirError) fail('TokenizerModelMismatch', err.message, err);
    throw err;
  }
}

function dataErrors<T>(fn: () => T): T {
  try {
    return fn();
  } catch (err) {
    if (err instanceof SftDataError) fail(err.code, err.message, err);
    throw err;
  }
}

export function createSftActivities(deps: { store: ArtifactStore; logger?: Logger }) {
  const log = deps.logger ?? componentLogger('sft');

  async function prepareSftData(input: PrepareSftDataInput): Promise<PrepareSftDataResult> {
    return withStoreErrors(async () => {
      const store = storeFor(input.artifacts, deps.store);
      const key = runKeys.sftData(input.runId);
      const existing = await store.exists(key);
      if (existing) {
        const lines = (await store.get(existing)).toString('utf8').split('\n').filter((l) => l !== '');
        return { data: existing, trajectories: lines.length, rejected: 0 };
      }
      const tok = tokenizer(input.modelPath);
      const items: SftItem[] = [];
      for (const file of input.data) {
        let text: string;
        try {
          text = await readFile(file, 'utf8');
        } catch (err) {
          fail('SftDataMissing', `sft.data: cannot read ${file}: ${(err as Error).message}. Fix: name JSONL files that exist on the worker's host`);
        }
        items.push(...dataErrors(() => parseSftJsonl(text, file, tok)));
      }
      const kept = input.minReward === undefined ? items
        : (() => { const ok = new Set<Trajectory>(successful(items.map((i) => i.trajectory), input.minReward)); return items.filter((i) => ok.has(i.trajectory)); })();
      if (kept.length === 0) {
        fail('NoTrajectories', `sft.min_reward = ${input.minReward}: none of the ${items.length} trajectories of ${input.data.join(', ')} ` +
          'completed with that reward. Fix: lower sft.min_reward, or add successful episodes');
      }
      const data = await store.put(key, kept.map((i) => JSON.stringify({ where: i.where, trajectory: i.trajectory })).join('\n') + '\n');
      log.info({ run_id: input.runId, trajectories: kept.length, rejected: items.length - kept.length }, 'sft data frozen');
      return { data, trajectories: kept.length, rejected: items.length - kept.length };
    });
  }

  async function buildSftBatchActivity(input: BuildSftBatchInput): Promise<BuildBatchOutput> {
    return withStoreErrors(async () => {
      const buf = await storeForRef(input.data, input.artifacts, deps.store).get(input.data);
      const all = buf.toString('utf8').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l) as SftItem);
      const items = sftStepIndices(all.length, input.batchSize, input.seed, input.step).map((i) => all[i]!);
      const tok = tokenizer(input.modelPath);
      const built = dataErrors(() => buildSftBatch(items, tok, { seqLen: input.seqLen, runId: input.runId, step: input.step }));
      const keys = runKeys.batch(input.runId, input.step);
      const store = storeFor(input.artifacts, deps.store);
      const batch = await store.put(keys.batch, writeSafetensors(built.tensors, { format: 'ratchet.batch/v1' }));
      const manifest = await store.put(keys.manifest, JSON.stringify(built.manifest));
      log.info({ run_id: input.runId, step: input.step, ...built.stats, sources: undefined }, 'sft batch built');
      return { batch, manifest, summary: { ...built.stats, dropped: {} } };
    });
  }

  return { prepareSftData, buildSftBatch: buildSftBatchActivity } satisfies SftActivities;
}
