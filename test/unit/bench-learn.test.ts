import { bootstrapCi } from '../../src/bench/learn';

describe('bench:learn bootstrap interval', () => {
  test('brackets the mean, is deterministic, and narrows with more tasks', () => {
    const few = [0, 1, 0, 1, 1, 0];
    const a = bootstrapCi(few);
    expect(a.mean).toBeCloseTo(0.5);
    expect(a.lo).toBeLessThan(0.5);
    expect(a.hi).toBeGreaterThan(0.5);
    expect(bootstrapCi(few)).toEqual(a);
    const many = bootstrapCi(Array.from({ length: 60 }, (_, i) => i % 2));
    expect(many.hi - many.lo).toBeLessThan(a.hi - a.lo);
  });
});
