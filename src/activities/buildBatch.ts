import * as path from 'node:path';
import { ApplicationFailure } from '@temporalio/common';
import { runKeys } from '../artifacts/keys';
import { ArtifactRef } from '../artifacts/ref';
import { ArtifactIntegrityError, type ArtifactStore } from '../artifacts/store';
import type { StoreSettings } from '../artifacts/settings';
import { storeFor, storeForRef, withStoreErrors } from '../artifacts/stores';
import { BuildBatchInput, type BatchActivities } from '../contracts';
import { readRolloutSummaries } from './rolloutSummaries';
import { RolloutSummary, type Trajectory } from '../contracts/trajectory';
import { buildBatchStreaming, headerOf, type BatchStats, type RolloutHeader } from '../samples/builder';
import { BatchBuildError } from '../samples/errors';
import { parseTrajectory } from '../samples/parseTrajectory';
import { writeSafetensors } from '../samples/safetensors';
import { loadModelTokenizer, ModelDirError } from '../samples/tokenizer';
import { componentLogger, type Logger } from '../shared/logger';

/**
 * The batch-building activity: trajectories (by reference) in, the packed training
 * batch and its manifest written to the artifact store, references and a small
 * summary out. Idempotent: the same inputs give the same bytes at the same keys
 * (`runs/<run>/steps/<step>/batch.safetensors` and `batch.json`), so a retry
 * rewrites identical files. Bad input fails non-retryably with the cause as the
 * ApplicationFailure type; retrying would give the same answer.
 */

export interface BuildBatchResult {
  batch: ArtifactRef;
  manifest: ArtifactRef;
  summary: BatchStats;
}

export interface BatchActivityDeps {
  store: ArtifactStore;
  logger?: Logger;
}

function fail(type: string, message: string, cause?: Error): never {
  throw ApplicationFailure.create({ type, message, nonRetryable: true, cause });
}

/** Trajectories read ahead of the one being built: their reads overlap, and no more than these are held at once. */
const READ_WINDOW = 16;

function isSummary(x: RolloutSummary | ArtifactRef): x is RolloutSummary {
  return 'trajectory' in x;
}

export function createBatchActivities(deps: BatchActivityDeps) {
  const log = deps.logger ?? componentLogger('batch-builder');

  async function readTrajectory(ref: ArtifactRef, settings: StoreSettings | undefined): Promise<Trajectory> {
    let buf: Buffer;
    try {
      buf = await storeForRef(ref, settings, deps.store).get(ref);
    } catch (err) {
      if (err instanceof ArtifactIntegrityError) fail('CorruptArtifact', `trajectory ${err.message}`, err);
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        fail('MissingArtifact', `trajectory ${ref.uri} does not exist: the artifact store lost it or the reference is wrong. ` +
          'Fix: re-run the step\'s rollouts (restart the run from its last completed step)', err as Error);
      }
      throw err; // I/O trouble may pass: let Temporal retry
    }
    let raw: unknown;
    try {
      raw = JSON.parse(buf.toString('utf8'));
    } catch (err) {
      fail('MalformedTrajectory', `trajectory ${ref.uri} is not JSON: ${(err as Error).message}`);
    }
    const parsed = parseTrajectory(raw);
    if (!parsed.ok) {
      fail('MalformedTrajectory', `trajectory ${ref.uri} does not match the ratchet.trajectory/v1 schema (src/contracts/trajectory.ts): ` +
        `field ${parsed.field}: ${parsed.message}` + (parsed.more > 0 ? ` (and ${parsed.more} more issues)` : ''));
    }
    return parsed.value;
  }

  async function buildBatch(rawInput: BuildBatchInput): Promise<BuildBatchResult> {
    return withStoreErrors(() => buildBatchIn(rawInput));
  }

  async function buildBatchIn(rawInput: BuildBatchInput): Promise<BuildBatchResult> {
    const inputParsed = BuildBatchInput.safeParse(rawInput);
    if (!inputParsed.success) {
      const issue = inputParsed.error.issues[0]!;
      fail('InvalidInput', `buildBatch input field ${issue.path.join('.')}: ${issue.message}`);
    }
    const input = inputParsed.data;
    const t0 = Date.now();

    let tok;
    try {
      tok = loadModelTokenizer(input.modelPath);
    } catch (err) {
      if (err instanceof ModelDirError) fail('TokenizerModelMismatch', err.message, err);
      throw err;
    }

    const listed = input.summaries ? await readRolloutSummaries(deps.store, input.summaries, input.artifacts) : input.trajectories;
    const refs = listed.map((x) => (isSummary(x) ? x.trajectory : x));
    const load = async (i: number) => ({ trajectory: await readTrajectory(refs[i]!, input.artifacts), label: refs[i]!.uri });
    // A summary says all the plan needs; a bare reference is read once for it (and again for its tokens).
    const headers: RolloutHeader[] = [];
    for (const [i, x] of listed.entries()) {
      headers.push(isSummary(x)
        ? { group_id: x.group_id, task_id: x.task_id, rollout_index: x.rollout_index, sha256: x.trajectory.sha256, stop_reason: x.stop_reason,
          reward: { total: x.reward, components: x.components } }
        : headerOf({ trajectory: (await load(i)).trajectory, label: x.uri, sha256: x.sha256 }));
    }
    const tRead = Date.now();

    let built;
    try {
      // Trajectories are read a window at a time and let go once their samples are built (issue 39, hole 11).
      built = await buildBatchStreaming(headers, load, { ...input.orchestrator, ...(input.loss ? { loss: input.loss } : {}) }, tok, {
        runId: input.runId, step: input.step, trainerPolicyVersion: input.trainerPolicyVersion, modelName: path.basename(tok.modelPath),
      }, { window: READ_WINDOW });
    } catch (err) {
      if (err instanceof BatchBuildError) fail(err.code, err.message, err);
      throw err;
    }
    const { stats, manifest, tensors } = built;
    if (stats.trainable_tokens === 0) {
      const causes = Object.entries(stats.dropped).filter(([, n]) => n > 0).map(([c, n]) => `${c}: ${n}`).join(', ') || 'no rollouts';
      fail('EmptyBatch', `step ${input.step} of run ${input.runId}: no sample has a trainable token, so there is nothing to train on ` +
        `(${listed.length} rollouts; dropped samples by cause: ${causes}). ` +
        'Fix: look at the causes: stale -> raise orchestrator.async_level; truncated_masked -> raise seq_len or sampling.max_tokens; ' +
        'uniform_group -> set advantage.drop_uniform_groups = false or make the tasks less uniform; ' +
        'limit_ended -> raise the env\'s max_turns / max_tool_calls / max_tokens, or set orchestrator.limit_ended = "score"');
    }

    const keys = runKeys.batch(input.runId, input.step);
    const batchBytes = writeSafetensors(tensors, { format: manifest.format });
    const runStore = storeFor(input.artifacts, deps.store);
    const batch = await runStore.put(keys.batch, batchBytes);
    const manifestRef = await runStore.put(keys.manifest, JSON.stringify(manifest));
    log.info({
      run_id: input.runId, step: input.step, samples: stats.samples, tokens: stats.tokens, trainable_tokens: stats.trainable_tokens,
      dropped: stats.dropped, non_prefix_breaks: stats.non_prefix_breaks, plan_ms: tRead - t0, read_and_build_ms: Date.now() - tRead,
    }, 'batch built');
    return { batch, manifest: manifestRef, summary: stats };
  }

  return { buildBatch } satisfies BatchActivities;
}
