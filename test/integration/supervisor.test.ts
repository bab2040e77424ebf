/**
 * The supervisor that `ratchet up` starts (src/stack/supervise.ts), on the real
 * stack's workers: one frozen with SIGSTOP is kill -9ed and started again once its
 * liveness file is stale (aged by the test, as the minute a frozen worker leaves it untouched would); one
 * killed -9 is started again.
 */
import { existsSync, statSync, utimesSync } from 'node:fs';
import { describeWithStack } from '../helpers/stack';
import { isAlive, readPid } from '../../src/shared/pidFiles';
import { serviceStatus } from '../../src/stack/processes';
import { livenessFileOf } from '../../src/stack/supervisor';
import { dockerPingProbe, temporalHealthProbe } from '../../src/stack/supervise';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function replaced(name: string, old: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const pid = readPid(name);
    if (pid !== undefined && pid !== old && isAlive(pid)) return pid;
    if (Date.now() > deadline) throw new Error(`${name} (pid ${old}) was not replaced within ${timeoutMs / 1000} s; see .ratchet/logs/supervisor.log`);
    await sleep(500);
  }
}

describeWithStack('ratchet up supervises its workers', ['temporalServer'], () => {
  beforeAll(() => {
    if (!serviceStatus('supervisor').running || !serviceStatus('worker-rollout').running || !serviceStatus('worker-main').running) {
      throw new Error('the stack\'s supervisor and workers are not running. Fix: bin/ratchet up');
    }
  });

  test('every worker touches its liveness file', () => {
    for (const name of ['worker-main', 'worker-rollout', 'worker-trainer']) {
      const file = livenessFileOf(name);
      expect([name, existsSync(file)]).toEqual([name, true]);
      expect(Date.now() - statSync(file).mtimeMs).toBeLessThan(15_000);
    }
  });

  test('the service probes answer true for the stack\'s live Temporal server and dockerd', async () => {
    expect(await temporalHealthProbe(`127.0.0.1:${process.env.RATCHET_TEMPORAL_PORT ?? '7233'}`)()).toBe(true);
    expect(await dockerPingProbe()()).toBe(true);
    for (const name of ['temporal', 'dockerd']) expect([name, Date.now() - statSync(livenessFileOf(name)).mtimeMs < 15_000]).toEqual([name, true]);
  });

  test('a frozen (SIGSTOP) rollout worker is killed -9 and started again', async () => {
    const old = readPid('worker-rollout')!;
    process.kill(old, 'SIGSTOP');
    // A frozen worker touches its liveness file no more: age it past RATCHET_SUPERVISOR_STALE_S (60 s by default) at
    // once, as the minute of waiting did (it cost CI that minute). A file older than the worker's process counts from
    // its start (plus a start grace) instead, so only a worker up for a while is killed at once. The supervisor checks
    // every 5 s, then a start of up to 60 s.
    const file = livenessFileOf('worker-rollout');
    const aged = new Date(Date.now() - 65_000);
    utimesSync(file, aged, aged);
    try {
      await replaced('worker-rollout', old, 120_000);
    } finally {
      try { process.kill(old, 'SIGCONT'); } catch { /* killed, as it should be */ }
    }
    expect(isAlive(old)).toBe(false);
  }, 240_000);

  test('a worker killed -9 is started again', async () => {
    const old = readPid('worker-main')!;
    process.kill(old, 'SIGKILL');
    await replaced('worker-main', old, 90_000);
  }, 120_000);
});
