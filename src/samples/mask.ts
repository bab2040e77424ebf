import type { Segment } from './assemble';

/**
 * Fitting a sample to seq_len (pure). A sample longer than seq_len is cut there.
 * With mask_truncated_completions (prime-rl's option of the same name) a cut
 * sample, or one whose completion stopped at the server's max_tokens, loses its
 * whole loss mask: its reward was earned by an episode the trainer cannot see
 * whole, so it should not push the policy either way.
 */

export interface Fitted {
  segment: Segment;
  /** Cut at seq_len. */
  cut: boolean;
  /** Loss mask zeroed by mask_truncated_completions. */
  masked: boolean;
  trainable: number;
}

export function countTrainable(mask: readonly number[]): number {
  let n = 0;
  for (const m of mask) n += m;
  return n;
}

export function fitToSeqLen(seg: Segment, seqLen: number, maskTruncated: boolean, episodeTruncated: boolean): Fitted {
  const cut = seg.ids.length > seqLen;
  const out: Segment = cut
    ? { ...seg, ids: seg.ids.slice(0, seqLen), mask: seg.mask.slice(0, seqLen), logprobs: seg.logprobs.slice(0, seqLen) }
    : seg;
  const masked = maskTruncated && (cut || episodeTruncated);
  if (masked) {
    out.mask = new Array<number>(out.ids.length).fill(0);
    out.logprobs = new Array<number>(out.ids.length).fill(0);
  }
  return { segment: out, cut, masked, trainable: masked ? 0 : countTrainable(out.mask) };
}
