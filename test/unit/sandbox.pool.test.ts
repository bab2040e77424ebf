import pino from 'pino';
import { WarmPool } from '../../src/sandbox/pool';
import { removalReason } from '../../src/sandbox/janitor';

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

describe('janitor removalReason', () => {
  const ctx = { hostname: 'h1', now: Date.parse('2025-01-01T03:00:00Z'), maxAgeMs: 3600_000, isAlive: (pid: number) => pid === 42 };
  const labels = (worker: string, created = '2025-01-01T02:30:00Z') => ({ 'ratchet.worker': worker, 'ratchet.created': created });

  it.each([
    ['live worker on this host', labels('h1:42'), null],
    ['dead worker on this host', labels('h1:43'), 'worker is dead'],
    ['worker on another host', labels('h2:43'), null],
    ['too old even with a live worker', labels('h1:42', '2025-01-01T01:00:00Z'), 'older than max age'],
    ['garbled worker label', labels('nonsense'), 'no valid worker label'],
  ])('%s', (_name, l, reason) => {
    expect(removalReason(l, ctx)).toBe(reason);
  });
});
