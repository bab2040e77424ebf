import type { Tensor } from './safetensors';

/**
 * Packs samples back to back into the contract's 1-D tensors (docs/contracts.md,
 * "Training batch"): position ids restart at 0 per sample; advantages and
 * inference logprobs are 0 wherever the loss mask is 0.
 */

export interface PackedSample {
  ids: ArrayLike<number>;
  mask: ArrayLike<number>;
  logprobs: ArrayLike<number>;
  advantage: number;
  trainable: number;
  /** Samples of one trajectory (a split episode's segments) are adjacent and share this index. */
  trajectory?: number;
}

export interface Packed {
  tensors: Record<string, Tensor>;
  offsets: number[];
  totalTokens: number;
  trainableTokens: number;
}

export function packSamples(samples: readonly PackedSample[]): Packed {
  let T = 0;
  for (const s of samples) T += s.ids.length;
  const inputIds = new Int32Array(T);
  const positionIds = new Int32Array(T);
  const lossMask = new Uint8Array(T);
  const advantages = new Float32Array(T);
  const logprobs = new Float32Array(T);
  const offsets = new BigInt64Array(samples.length + 1);
  const trajectoryIndex = new BigInt64Array(samples.length);
  const plainOffsets = [0];
  let t = 0;
  let trainable = 0;
  samples.forEach((s, i) => {
    for (let j = 0; j < s.ids.length; j++, t++) {
      inputIds[t] = s.ids[j]!;
      positionIds[t] = j;
      // The first token of a sample has no context: never trainable, whatever the input says.
      const m = j === 0 ? 0 : s.mask[j]!;
      lossMask[t] = m;
      if (m) {
        advantages[t] = s.advantage;
        logprobs[t] = s.logprobs[j]!;
        trainable++;
      }
    }
    offsets[i + 1] = BigInt(t);
    trajectoryIndex[i] = BigInt(s.trajectory ?? i);
    plainOffsets.push(t);
  });
  return {
    tensors: {
      input_ids: { dtype: 'I32', data: inputIds },
      position_ids: { dtype: 'I32', data: positionIds },
      loss_mask: { dtype: 'U8', data: lossMask },
      advantages: { dtype: 'F32', data: advantages },
      inference_logprobs: { dtype: 'F32', data: logprobs },
      sample_offsets: { dtype: 'I64', data: offsets },
      trajectory_index: { dtype: 'I64', data: trajectoryIndex },
    },
    offsets: plainOffsets,
    totalTokens: T,
    trainableTokens: trainable,
  };
}
