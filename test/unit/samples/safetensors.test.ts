import { readSafetensors, SafetensorsError, writeSafetensors } from '../../../src/samples/safetensors';

describe('safetensors writer and reader', () => {
  const tensors = {
    input_ids: { dtype: 'I32' as const, data: Int32Array.from([1, 2, 3, 49151]) },
    loss_mask: { dtype: 'U8' as const, data: Uint8Array.from([0, 1, 1]) },
    advantages: { dtype: 'F32' as const, data: Float32Array.from([0, -0.5, 1.25]) },
    sample_offsets: { dtype: 'I64' as const, data: BigInt64Array.from([0n, 3n]) },
  };

  test('round-trips dtypes, shapes and values', () => {
    const { tensors: back, metadata } = readSafetensors(writeSafetensors(tensors, { format: 'x' }));
    expect(metadata).toEqual({ format: 'x' });
    expect(Array.from(back.input_ids!.data as Int32Array)).toEqual([1, 2, 3, 49151]);
    expect(Array.from(back.loss_mask!.data as Uint8Array)).toEqual([0, 1, 1]);
    expect(Array.from(back.advantages!.data as Float32Array)).toEqual([0, -0.5, 1.25]);
    expect(Array.from(back.sample_offsets!.data as BigInt64Array)).toEqual([0n, 3n]);
    expect(back.input_ids!.shape).toEqual([4]);
  });

  test('layout: 8-byte LE header length, space-padded JSON to 8 bytes, aligned contiguous data', () => {
    const buf = writeSafetensors(tensors);
    const n = Number(buf.readBigUInt64LE(0));
    expect(n % 8).toBe(0);
    const header = buf.subarray(8, 8 + n).toString('utf8');
    expect(header).toMatch(/^\{.*\} *$/);
    const h = JSON.parse(header) as Record<string, { dtype: string; data_offsets: [number, number] }>;
    // Widest dtype first: each tensor starts aligned to its element size; no holes.
    const spans = Object.values(h).map((v) => v.data_offsets).sort((a, b) => a[0] - b[0]);
    expect(spans[0]![0]).toBe(0);
    for (let i = 1; i < spans.length; i++) expect(spans[i]![0]).toBe(spans[i - 1]![1]);
    expect(8 + n + spans[spans.length - 1]![1]).toBe(buf.length);
    expect(h.sample_offsets!.data_offsets[0]).toBe(0);
    expect(buf.subarray(8 + n, 8 + n + 8).readBigInt64LE(0)).toBe(0n);
  });

  test('is deterministic: same tensors, same bytes, whatever the key order', () => {
    const reordered = { sample_offsets: tensors.sample_offsets, loss_mask: tensors.loss_mask, advantages: tensors.advantages, input_ids: tensors.input_ids };
    expect(writeSafetensors(reordered).equals(writeSafetensors(tensors))).toBe(true);
  });

  test('rejects a typed array of the wrong kind and a truncated buffer', () => {
    expect(() => writeSafetensors({ x: { dtype: 'I32', data: new Float32Array(2) } })).toThrow(SafetensorsError);
    expect(() => readSafetensors(writeSafetensors(tensors).subarray(0, 20))).toThrow(/header claims/);
  });
});
