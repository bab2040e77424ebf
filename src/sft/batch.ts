import { mulberry32 } from '../shared/random';
import { fitToSeqLen } from '../samples/mask';
import { packSamples, type PackedSample } from '../samples/pack';
import type { Tensor } from '../samples/safetensors';
import type { ModelTokenizer } from '../samples/tokenizer';
import { sftSegments, SftDataError, type SftItem } from './trajectories';

/**
 * One SFT step's batch (pure given its inputs): which trajectories it holds, and
 * their packed tensors in the trainer's batch format (ratchet.batch/v1). The
 * advantages and inference logprobs are 0: the SFT loss reads neither, only the
 * loss mask, which is the RL mask (the policy's tokens).
 */

export const SFT_BATCH_FORMAT = 'ratchet.batch/v1';

/**
 * The trajectories of step `step`: epochs over the data, each epoch a fresh seeded
 * permutation, batches taken in order across epoch ends. Deterministic from
 * (seed, step), so a replayed or retried step trains the same batch.
 */
export function sftStepIndices(n: number, batchSize: number, seed: number, step: number): number[] {
  if (n <= 0) return [];
  const perm = (epoch: number): number[] => {
    const rand = mulberry32((seed * 1_000_003 + epoch * 7_919) >>> 0);
    const p = Array.from({ length: n }, (_, i) => i);
    for (let i = n - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [p[i], p[j]] = [p[j]!, p[i]!];
    }
    return p;
  };
  const out: number[] = [];
  const cache = new Map<number, number[]>();
  for (let pos = step * batchSize; pos < (step + 1) * batchSize; pos++) {
    const epoch = Math.floor(pos / n);
    if (!cache.has(epoch)) cache.set(epoch, perm(epoch));
    out.push(cache.get(epoch)![pos % n]!);
  }
  return out;
}

export interface SftBatchStats {
  trajectories: number;
  samples: number;
  tokens: number;
  trainable_tokens: number;
  /** Samples cut at seq_len (their tail carries no loss). */
  truncated_samples: number;
  /** The trajectories, by where they came from (`file:line`). */
  sources: string[];
}

export interface SftBatch {
  tensors: Record<string, Tensor>;
  manifest: Record<string, unknown>;
  stats: SftBatchStats;
}

export function buildSftBatch(items: readonly SftItem[], tok: ModelTokenizer, opts: { seqLen: number; runId: string; step: number }): SftBatch {
  const samples: PackedSample[] = [];
  const sampleSource: string[] = [];
  let truncated = 0;
  let trajectory = 0;
  for (const item of items) {
    let kept = 0;
    for (const seg of sftSegments(item.trajectory, tok, item.where)) {
      const fit = fitToSeqLen(seg, opts.seqLen, false, false);
      if (fit.cut) truncated++;
      if (fit.trainable === 0) continue;
      samples.push({ ids: fit.segment.ids, mask: fit.segment.mask, logprobs: new Array<number>(fit.segment.ids.length).fill(0),
        advantage: 0, trainable: fit.trainable, trajectory });
      sampleSource.push(item.where);
      kept++;
    }
    if (kept > 0) trajectory++;
  }
  if (samples.length === 0) {
    throw new SftDataError('NoTrainableTokens', `SFT step ${opts.step} of run ${opts.runId}: no trajectory keeps a trainable token within ` +
      `seq_len ${opts.seqLen} (${items.map((i) => i.where).join(', ')}). Fix: raise orchestrator.seq_len`);
  }
  const packed = packSamples(samples);
  const stats: SftBatchStats = {
    trajectories: trajectory, samples: samples.length, tokens: packed.totalTokens, trainable_tokens: packed.trainableTokens,
    truncated_samples: truncated, sources: items.map((i) => i.where),
  };
  const manifest = {
    format: SFT_BATCH_FORMAT, kind: 'sft', run_id: opts.runId, step: opts.step, model_path: tok.modelPath,
    tokenizer_sha256: tok.tokenizerSha256, chat_template_sha256: tok.templateSha256,
    vocab_size: tok.modelVocabSize ?? tok.tokenizerVocabSize, seq_len: opts.seqLen,
    num_samples: samples.length, num_trajectories: trajectory, total_tokens: packed.totalTokens, trainable_tokens: packed.trainableTokens,
    samples: samples.map((s, j) => ({ index: j, offset: packed.offsets[j]!, tokens: s.ids.length, trainable_tokens: s.trainable,
      trajectory: s.trajectory, source: sampleSource[j] })),
  };
  return { tensors: packed.tensors, manifest, stats };
}
