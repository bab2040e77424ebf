/**
 * Light activities heartbeat (issue 39, hole 11): the main worker wraps them (beatWhileRunning), and the
 * LIGHT proxy has a heartbeat timeout, so a main worker killed mid-activity is noticed within a minute
 * instead of the 10-minute start-to-close. Checked in Temporal's activity test environment: a slow
 * activity beats on the timer, one that beats itself (withLiveness) is left to its own beats.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { beatWhileRunning, withLiveness } from '../../../src/activities/liveness';
import { LIGHT } from '../../../src/workflows/proxies';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('light activities heartbeat', () => {
  test('the LIGHT proxy has a heartbeat timeout well below its start-to-close timeout', () => {
    expect(LIGHT.heartbeatTimeout).toBe('1 minute');
    expect(LIGHT.startToCloseTimeout).toBe('10 minutes');
  });

  test('a slow activity that never heartbeats itself beats on the timer; one that does is left alone', async () => {
    const acts = beatWhileRunning({
      async slow(ms: number) { await sleep(ms); return 'done'; },
      async own(ms: number) {
        return withLiveness({ name: 'own', heartbeatEveryMs: 1_000_000, stallMs: 10_000_000 }, async (live) => {
          live.progress({ phase: 'mine' });
          await sleep(ms);
          return 'mine';
        });
      },
    }, 50);
    const env = new MockActivityEnvironment();
    const beats: unknown[] = [];
    env.on('heartbeat', (d: unknown) => beats.push(d));
    expect(await env.run(acts.slow, 330)).toBe('done');
    // One at the start, then one every 50 ms: 6 in 330 ms (timers may run late: at least 4).
    expect(beats[0]).toEqual({ phase: 'started' });
    expect(beats.length).toBeGreaterThanOrEqual(4);
    expect(beats.slice(1).every((b) => JSON.stringify(b) === '{"phase":"running"}')).toBe(true);

    beats.length = 0;
    expect(await env.run(acts.own, 330)).toBe('mine');
    // The wrapper's first beat, then withLiveness's own at its start; none from the timer after it.
    expect(beats).toEqual([{ phase: 'started' }, { phase: 'started' }]);
  });
});
