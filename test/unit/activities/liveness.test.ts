/**
 * withLiveness (src/activities/liveness.ts): heartbeats on a timer whatever the
 * work does, the newest progress as details, and a watchdog that stops the
 * heartbeat when progress stops, then aborts the work one heartbeat timeout later.
 * Real activity context (MockActivityEnvironment), fake clock.
 *
 * The "light activities heartbeat" block:
 * Light activities heartbeat (issue 39, hole 11): the main worker wraps them (beatWhileRunning), and the
 * LIGHT proxy has a heartbeat timeout, so a main worker killed mid-activity is noticed within a minute
 * instead of the 10-minute start-to-close. Checked in Temporal's activity test environment: a slow
 * activity beats on the timer, one that beats itself (withLiveness) is left to its own beats.
 */
import { MockActivityEnvironment } from '@temporalio/testing';
import { StalledError, withLiveness, beatWhileRunning } from '../../../src/activities/liveness';
import { createWeightSyncActivities } from '../../../src/activities/weightSync';
import { crossFieldIssues, RunConfig } from '../../../src/config/schema';
import { parseRunConfig } from '../../../src/config/load';
import { logger } from '../../../src/shared/logger';
import { LIGHT } from '../../../src/workflows/proxies';

const quiet = logger.child({ component: 'test' });
quiet.level = 'silent';

function env(heartbeatTimeoutMs = 60_000) {
  const e = new MockActivityEnvironment({ heartbeatTimeoutMs });
  const beats: { at: number; details: unknown }[] = [];
  e.on('heartbeat', (details: unknown) => beats.push({ at: Date.now(), details }));
  return { e, beats };
}

/** Lets fake time pass in small slices, so timers and awaited promises interleave as they would. */
async function advance(ms: number, slice = 1_000): Promise<void> {
  for (let t = 0; t < ms; t += slice) await jest.advanceTimersByTimeAsync(Math.min(slice, ms - t));
}

describe('withLiveness', () => {
  beforeEach(() => jest.useFakeTimers({ now: 1_000_000 }));
  afterEach(() => jest.useRealTimers());

  test('heartbeats every period while the work is busy and says nothing (one slow model call)', async () => {
    const { e, beats } = env();
    let finish!: () => void;
    const run = e.run(() => withLiveness({ name: 'rollout', heartbeatEveryMs: 10_000, stallMs: 600_000, logger: quiet }, async (live) => {
      live.progress({ phase: 'agent', turn: 1 });
      await new Promise<void>((r) => { finish = r; });
      return 'done';
    }));
    await advance(125_000); // longer than the 1-minute heartbeat timeout
    finish();
    await expect(run).resolves.toBe('done');
    expect(beats.length).toBeGreaterThanOrEqual(12);
    const gaps = beats.slice(1).map((b, i) => b.at - beats[i]!.at);
    expect(Math.max(...gaps)).toBeLessThanOrEqual(10_000);
    expect(beats.at(-1)!.details).toEqual({ phase: 'agent', turn: 1 });
  });

  test('no progress for the stall window: the heartbeat stops, then the work is aborted one heartbeat timeout later', async () => {
    const { e, beats } = env(60_000);
    let sawAbort: unknown;
    const run = e.run(() => withLiveness({ name: 'rollout', heartbeatEveryMs: 10_000, stallMs: 30_000, logger: quiet }, async (live) => {
      live.progress({ phase: 'sandbox acquired' });
      live.signal.addEventListener('abort', () => { sawAbort = live.signal.reason; });
      await new Promise(() => { /* hung: never resolves, ignores the signal */ });
    }));
    const outcome = run.catch((err: unknown) => err);
    await advance(35_000);
    const atStall = beats.length;
    expect(atStall).toBeGreaterThanOrEqual(3);
    expect(beats.every((b) => b.at <= 1_000_000 + 30_000)).toBe(true);
    await advance(50_000);
    expect(beats.length).toBe(atStall); // heartbeats stopped: Temporal's heartbeat timeout fires
    expect(sawAbort).toBeUndefined(); // not yet: the heartbeat timeout has not passed
    await advance(30_000);
    expect(sawAbort).toBeInstanceOf(StalledError);
    const err = await outcome;
    expect(err).toBeInstanceOf(StalledError);
    expect((err as Error).message).toMatch(/no progress for 30 s.*sandbox acquired/);
  });

  test('progress keeps it alive indefinitely', async () => {
    const { e, beats } = env();
    const run = e.run(() => withLiveness({ name: 'rollout', heartbeatEveryMs: 10_000, stallMs: 30_000, logger: quiet }, async (live) => {
      for (let turn = 1; turn <= 10; turn++) {
        await new Promise((r) => setTimeout(r, 20_000));
        live.progress({ turn });
      }
      return live.stalled;
    }));
    await advance(210_000);
    await expect(run).resolves.toBe(false);
    expect(beats.length).toBeGreaterThanOrEqual(20);
  });

  test('cancellation from Temporal reaches the work through the same signal', async () => {
    const { e } = env();
    let reason: unknown;
    const run = e.run(() => withLiveness({ name: 'rollout', heartbeatEveryMs: 10_000, stallMs: 600_000, logger: quiet }, async (live) => {
      await new Promise<void>((resolve) => live.signal.addEventListener('abort', () => { reason = live.signal.reason; resolve(); }));
      return 'stopped';
    }));
    await advance(5_000);
    e.cancel();
    await advance(1_000);
    await expect(run).resolves.toBe('stopped');
    expect(reason).toBeDefined();
  });
});

describe('syncWeights heartbeats on a timer', () => {
  beforeEach(() => jest.useFakeTimers({ now: 1_000_000 }));
  afterEach(() => jest.useRealTimers());

  test('a slow HTTP call to vLLM still heartbeats; with no response for the stall window it stops', async () => {
    const { e, beats } = env(60_000);
    const pending: (() => void)[] = [];
    const fetchFn = (async () => {
      await new Promise<void>((r) => pending.push(r));
      return new Response(JSON.stringify({ data: [{ id: 'base' }] }), { status: 200 });
    }) as unknown as typeof fetch;
    const { syncWeights } = createWeightSyncActivities({ logger: quiet, fetch: fetchFn });
    const run = e.run(() => syncWeights({
      runId: 'r', baseUrls: ['http://x/v1'], policyVersion: 0, keepFromVersion: 0,
      liveness: { heartbeat_every_s: 5, stall_s: 120 },
    }));
    await advance(40_000); // a call slower than most heartbeat timeouts
    expect(beats.length).toBeGreaterThanOrEqual(8);
    pending.shift()!();
    await expect(run).resolves.toMatchObject({ policyVersion: 0 });

    // The same call that never answers: heartbeats stop after the 120 s window.
    const hung = env(60_000);
    const outcome = hung.e.run(() => syncWeights({
      runId: 'r', baseUrls: ['http://x/v1'], policyVersion: 0, keepFromVersion: 0,
      liveness: { heartbeat_every_s: 5, stall_s: 120 },
    })).catch((err: unknown) => err);
    await advance(200_000);
    expect(hung.beats.length).toBeGreaterThanOrEqual(20);
    expect(hung.beats.at(-1)!.at).toBeLessThanOrEqual(Date.now() - 200_000 + 125_000);
    expect(await outcome).toBeInstanceOf(Error);
  });
});

describe('[liveness] config', () => {
  const base = { env: [{ id: 'swe-grep' }] };

  test('defaults sized for the CPU stack', () => {
    expect(RunConfig.parse(base).liveness).toEqual({ heartbeat_every_s: 10, rollout_stall_s: 600, trainer_stall_s: 900, weight_sync_stall_s: 180 });
  });

  test.each([
    ['heartbeat_every_s = 0', 'liveness.heartbeat_every_s'],
    ['heartbeat_every_s = 30', 'liveness.heartbeat_every_s'],
    ['trainer_stall_s = 10', 'liveness.trainer_stall_s'],
    ['weight_sync_stall_s = 5', 'liveness.weight_sync_stall_s'],
    ['stall_s = 5', 'liveness'],
  ])('%s is refused, naming the key', (line, key) => {
    expect(() => parseRunConfig(`[liveness]\n${line}\n[[env]]\nid = "swe-grep"\n`, 'run.toml')).toThrow(new RegExp(`run.toml: ${key.replace('.', '\\.')}`));
  });

  test('a rollout stall window shorter than one model call is refused with the fix', () => {
    const c = RunConfig.parse({ ...base, liveness: { rollout_stall_s: 200 } });
    expect(crossFieldIssues(c)).toEqual([expect.objectContaining({ path: ['liveness', 'rollout_stall_s'] })]);
    expect(() => parseRunConfig('[liveness]\nrollout_stall_s = 200\n[[env]]\nid = "swe-grep"\n', 'run.toml'))
      .toThrow(/run\.toml: liveness\.rollout_stall_s: 200 must exceed .*300 s.*Fix: raise liveness\.rollout_stall_s/);
  });
});

describe('light activities heartbeat', () => {
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

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
