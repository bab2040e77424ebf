/**
 * mulberry32: a tiny seeded PRNG, uniform in [0, 1). Enough to shuffle a soak's
 * fault schedule or make synthetic data reproducibly; not for anything secret.
 * Pure, so workflow code may import it. The sequences are pinned by
 * test/unit/shared/random.test.ts: a soak replays by its seed.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
