/**
 * Collects an exec's stdout and stderr under one byte budget shared by both, so
 * `yes` or a huge log cannot fill the worker's memory or the model's context.
 * Bytes past the budget are counted and dropped; the stream keeps draining so the
 * command is not blocked on a full pipe.
 */
export class OutputCollector {
  private readonly chunks: Record<'stdout' | 'stderr', Buffer[]> = { stdout: [], stderr: [] };
  private readonly cut: Record<'stdout' | 'stderr', boolean> = { stdout: false, stderr: false };
  private kept = 0;
  seenBytes = 0;

  constructor(readonly limitBytes: number) {
    if (!Number.isInteger(limitBytes) || limitBytes <= 0) {
      throw new Error(`output limit must be a positive integer number of bytes, got ${limitBytes}`);
    }
  }

  push(stream: 'stdout' | 'stderr', chunk: Buffer): void {
    this.seenBytes += chunk.length;
    const room = this.limitBytes - this.kept;
    if (chunk.length <= room) {
      this.chunks[stream].push(chunk);
      this.kept += chunk.length;
      return;
    }
    if (room > 0) {
      this.chunks[stream].push(chunk.subarray(0, room));
      this.kept += room;
    }
    this.cut[stream] = true;
  }

  get truncated(): boolean {
    return this.cut.stdout || this.cut.stderr;
  }

  text(stream: 'stdout' | 'stderr'): string {
    const buf = Buffer.concat(this.chunks[stream]);
    if (!this.cut[stream]) return buf.toString('utf8');
    return buf.subarray(0, utf8SafeEnd(buf)).toString('utf8') + truncationMarker(this.limitBytes);
  }
}

export function truncationMarker(limitBytes: number): string {
  return `\n[... output truncated at ${limitBytes} bytes ...]`;
}

/** Length of `buf` without a multi-byte UTF-8 character that the cut split in two. */
export function utf8SafeEnd(buf: Buffer): number {
  // Walk back over at most 3 continuation bytes to the lead byte of the last character.
  let i = buf.length - 1;
  let back = 0;
  while (i >= 0 && back < 3 && (buf[i]! & 0xc0) === 0x80) {
    i--;
    back++;
  }
  if (i < 0) return buf.length;
  const lead = buf[i]!;
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return buf.length - i >= need ? buf.length : i;
}
