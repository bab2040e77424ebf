import { endianness } from 'node:os';

/**
 * A minimal safetensors writer and reader (the format the Python trainer loads
 * with `safetensors.torch.load_file`): an 8-byte little-endian header length N,
 * N bytes of JSON header (padded with spaces so the data starts 8-byte aligned),
 * then the tensors' raw little-endian bytes back to back.
 */

export type Dtype = 'I64' | 'I32' | 'U8' | 'F32';
export type TypedArrayFor<D extends Dtype> =
  D extends 'I64' ? BigInt64Array : D extends 'I32' ? Int32Array : D extends 'U8' ? Uint8Array : Float32Array;
type AnyTyped = BigInt64Array | Int32Array | Uint8Array | Float32Array;

export interface Tensor {
  dtype: Dtype;
  data: AnyTyped;
  /** Defaults to 1-D: [data.length]. */
  shape?: number[];
}

const SIZE: Record<Dtype, number> = { I64: 8, I32: 4, U8: 1, F32: 4 };
const CTOR = { I64: BigInt64Array, I32: Int32Array, U8: Uint8Array, F32: Float32Array } as const;

export class SafetensorsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SafetensorsError';
  }
}

function checkKind(name: string, t: Tensor): void {
  if (!(t.data instanceof CTOR[t.dtype])) {
    throw new SafetensorsError(`tensor "${name}": dtype ${t.dtype} needs a ${CTOR[t.dtype].name}, got ${t.data.constructor.name}`);
  }
  const n = (t.shape ?? [t.data.length]).reduce((a, b) => a * b, 1);
  if (n !== t.data.length) throw new SafetensorsError(`tensor "${name}": shape ${JSON.stringify(t.shape)} holds ${n} elements, data has ${t.data.length}`);
}

function bytesOf(data: AnyTyped): Buffer {
  const view = Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (endianness() === 'LE' || data.BYTES_PER_ELEMENT === 1) return view;
  const out = Buffer.from(view); // copy, then swap each element to little-endian
  if (data.BYTES_PER_ELEMENT === 4) out.swap32();
  else out.swap64();
  return out;
}

/**
 * Serializes tensors deterministically: same tensors, same bytes. Tensors are laid
 * out widest dtype first, then by name, so every tensor starts at an offset aligned
 * to its element size (readers may view the data in place).
 */
export function writeSafetensors(tensors: Record<string, Tensor>, metadata?: Record<string, string>): Buffer {
  const names = Object.keys(tensors).sort((a, b) => {
    const d = SIZE[tensors[b]!.dtype] - SIZE[tensors[a]!.dtype];
    return d !== 0 ? d : a < b ? -1 : a > b ? 1 : 0;
  });
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let offset = 0;
  const parts: Buffer[] = [];
  for (const name of names) {
    const t = tensors[name]!;
    checkKind(name, t);
    const bytes = bytesOf(t.data);
    header[name] = { dtype: t.dtype, shape: t.shape ?? [t.data.length], data_offsets: [offset, offset + bytes.length] };
    offset += bytes.length;
    parts.push(bytes);
  }
  let json = JSON.stringify(header);
  const pad = (8 - (Buffer.byteLength(json) % 8)) % 8;
  json += ' '.repeat(pad);
  const head = Buffer.alloc(8);
  head.writeBigUInt64LE(BigInt(Buffer.byteLength(json)));
  return Buffer.concat([head, Buffer.from(json), ...parts]);
}

export interface ReadTensor {
  dtype: Dtype;
  shape: number[];
  data: AnyTyped;
}

/** Parses a safetensors buffer; each tensor's data is copied into its own aligned typed array. */
export function readSafetensors(buf: Buffer): { tensors: Record<string, ReadTensor>; metadata?: Record<string, string> } {
  if (buf.length < 8) throw new SafetensorsError(`safetensors buffer has ${buf.length} bytes, less than its 8-byte header length`);
  const n = Number(buf.readBigUInt64LE(0));
  if (8 + n > buf.length) throw new SafetensorsError(`safetensors header claims ${n} bytes but the buffer has ${buf.length - 8} after the length`);
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, unknown>;
  const dataStart = 8 + n;
  const tensors: Record<string, ReadTensor> = {};
  let metadata: Record<string, string> | undefined;
  for (const [name, raw] of Object.entries(header)) {
    if (name === '__metadata__') {
      metadata = raw as Record<string, string>;
      continue;
    }
    const info = raw as { dtype: Dtype; shape: number[]; data_offsets: [number, number] };
    const ctor = CTOR[info.dtype];
    if (!ctor) throw new SafetensorsError(`tensor "${name}" has dtype ${info.dtype}, which this reader does not handle`);
    const [b, e] = info.data_offsets;
    if (dataStart + e > buf.length || b > e) throw new SafetensorsError(`tensor "${name}" data_offsets [${b}, ${e}] fall outside the buffer`);
    // An own ArrayBuffer (offset 0), never Node's shared pool, so the typed view is aligned.
    const bytes = Buffer.from(new ArrayBuffer(e - b));
    buf.copy(bytes, 0, dataStart + b, dataStart + e);
    if (endianness() !== 'LE' && SIZE[info.dtype] === 4) bytes.swap32();
    if (endianness() !== 'LE' && SIZE[info.dtype] === 8) bytes.swap64();
    const data = new ctor(bytes.buffer, bytes.byteOffset, (e - b) / SIZE[info.dtype]);
    tensors[name] = { dtype: info.dtype, shape: info.shape, data };
  }
  return { tensors, metadata };
}
