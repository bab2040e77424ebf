import pino from 'pino';
import { WarmPool } from '../../../src/sandbox/pool';

const log = pino({ level: 'silent' });

describe('WarmPool', () => {
  function fakePool(size: number, failFirst = 0) {
    let n = 0;
    const destroyed: number[] = [];
    const pool = new WarmPool<number>({
      size,
      create: async () => {
        n++;
        if (n <= failFirst) throw new Error('dockerd down');
        return n;
      },
      destroy: async (i) => {
        destroyed.push(i);
      },
      log,
    });
    return { pool, destroyed, created: () => n };
  }

  it('fills to size, hands items out and refills', async () => {
    const { pool, created } = fakePool(2);
    expect(pool.take()).toBeUndefined(); // empty at first: the caller creates cold
    await pool.settled();
    expect(pool.available).toBe(2);
    expect(pool.take()).toBe(1);
    await pool.settled();
    expect(pool.available).toBe(2);
    expect(created()).toBe(3);
  });

  it('does not retry a failed create in a loop', async () => {
    const { pool, created } = fakePool(1, 5);
    pool.fill();
    await pool.settled();
    expect(created()).toBe(1);
    expect(pool.available).toBe(0);
  });

  it('destroys ready items and late arrivals on close', async () => {
    const { pool, destroyed } = fakePool(2);
    pool.fill();
    await pool.settled();
    pool.take();
    await pool.close(); // the refill started by take() lands after close began
    expect(destroyed.sort()).toEqual([2, 3]);
    pool.fill();
    expect(pool.available).toBe(0);
  });
});
