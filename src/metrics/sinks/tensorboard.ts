import { promises as fs } from 'node:fs';
import * as path from 'node:path';

/**
 * A TensorBoard event-file writer: scalars per step in the tfevents format
 * TensorBoard (and tbparse, and TensorFlow's summary iterator) read. No
 * TensorFlow needed: a record is
 *   uint64 length | uint32 masked crc32c(length) | Event protobuf | uint32 masked crc32c(data),
 * and an Event holds wall_time, step and a Summary of (tag, simple_value) pairs.
 */

const CRC_TABLE = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0x82f63b78 : c >>> 1; // Castagnoli, reflected
    t[n] = c >>> 0;
  }
  return t;
})();

export function crc32c(buf: Uint8Array): number {
  let crc = 0xffffffff;
  for (const b of buf) crc = CRC_TABLE[(crc ^ b) & 0xff]! ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** TFRecord's masking, so a crc of data that holds crcs does not look like one. */
export function maskedCrc(buf: Uint8Array): number {
  const crc = crc32c(buf);
  return ((((crc >>> 15) | (crc << 17)) >>> 0) + 0xa282ead8) >>> 0;
}

function varint(n: number | bigint): number[] {
  let v = BigInt(n);
  const out: number[] = [];
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v > 0n) b |= 0x80;
    out.push(b);
  } while (v > 0n);
  return out;
}

const lenDelimited = (field: number, bytes: Uint8Array | number[]): number[] => [(field << 3) | 2, ...varint(bytes.length), ...bytes];

function summaryValue(tag: string, value: number): number[] {
  const f = Buffer.alloc(4);
  f.writeFloatLE(value);
  return [...lenDelimited(1, Buffer.from(tag, 'utf8')), (2 << 3) | 5, ...f];
}

/** An Event protobuf: wall_time (1, double), step (2, int64), then file_version (3) or summary (5). */
export function encodeEvent(e: { wallTime: number; step?: number; fileVersion?: string; scalars?: Record<string, number> }): Buffer {
  const wall = Buffer.alloc(8);
  wall.writeDoubleLE(e.wallTime);
  const bytes: number[] = [(1 << 3) | 1, ...wall];
  if (e.step !== undefined) bytes.push((2 << 3) | 0, ...varint(e.step));
  if (e.fileVersion !== undefined) bytes.push(...lenDelimited(3, Buffer.from(e.fileVersion, 'utf8')));
  if (e.scalars) {
    const summary: number[] = [];
    for (const [tag, v] of Object.entries(e.scalars)) summary.push(...lenDelimited(1, summaryValue(tag, v)));
    bytes.push(...lenDelimited(5, summary));
  }
  return Buffer.from(bytes);
}

export function frameRecord(data: Buffer): Buffer {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(data.length));
  const head = Buffer.alloc(4);
  head.writeUInt32LE(maskedCrc(len));
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(maskedCrc(data));
  return Buffer.concat([len, head, data, tail]);
}

/** One events file per run directory; TensorBoard reads every `events.out.tfevents.*` in it. */
export const EVENTS_FILE = 'events.out.tfevents.0.ratchet';

/** Appends one step's scalars (non-finite values are left out: TensorBoard has no use for them). */
export async function writeTensorBoardStep(dir: string, step: number, wallTimeS: number, scalars: Record<string, number>): Promise<string> {
  await fs.mkdir(dir, { recursive: true });
  const file = path.join(dir, EVENTS_FILE);
  let exists = true;
  try {
    await fs.access(file);
  } catch {
    exists = false;
  }
  const finite = Object.fromEntries(Object.entries(scalars).filter(([, v]) => Number.isFinite(v)));
  const records = [
    ...(exists ? [] : [frameRecord(encodeEvent({ wallTime: wallTimeS, fileVersion: 'brain.Event:2' }))]),
    frameRecord(encodeEvent({ wallTime: wallTimeS, step, scalars: finite })),
  ];
  await fs.appendFile(file, Buffer.concat(records));
  return file;
}
