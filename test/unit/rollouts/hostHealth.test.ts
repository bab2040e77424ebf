/**
 * Issue 39, item 2: a sick rollout host takes itself out of service. Real dockerd for what the
 * host's probe and the sandbox manager say (dockerd gone: a worker pointed at a dead socket; the
 * sandbox image removed and put back), a real file for a task file that cannot be read, and a real
 * dev server for the worker that stops polling until its probe passes.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import pino from 'pino';
import { ApplicationFailure } from '@temporalio/common';
import { Worker } from '@temporalio/worker';
import { RunConfig } from '../../../src/config/schema';
import { SandboxManager, defaultImage } from '../../../src/sandbox';
import { HostHealth, hostFaultOf, probeHost, unhealthyHosts, healthKey } from '../../../src/rollouts/hostHealth';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import type { ArtifactRef } from '../../../src/artifacts/ref';
import { serveWhileHealthy } from '../../../src/workers/serveWhileHealthy';
import { describeWithStack } from '../../helpers/stack';
import { useFakeWorld } from '../../helpers/fakeWorld';

jest.setTimeout(120_000);

const log = pino({ level: 'silent' });
const dockerOk = spawnSync('docker', ['image', 'inspect', defaultImage()], { timeout: 10_000 }).status === 0;
if (!dockerOk && process.env.RATCHET_REQUIRE_STACK === '1') throw new Error(`host health tests: dockerd or ${defaultImage()} missing. Fix: bash infra/docker.sh setup`);
const describeDocker = dockerOk ? describe : describe.skip;
const limits = { ...RunConfig.parse({ env: [{ id: 'swe-grep' }] }).sandbox, memory_mb: 256, disk_mb: 64, warm_pool_size: 0 };
const labels = { run: `hh-${process.pid}`, step: 0, rollout: 'x' };

describeDocker('a sick rollout host, as Docker and the file system say it (real dockerd)', () => {
  test('dockerd gone (a dead socket): acquiring a sandbox is a host fault, and the probe says dockerd until it answers', async () => {
    const dead = new Docker({ socketPath: path.join(os.tmpdir(), `no-dockerd-${process.pid}.sock`) });
    const err = await new SandboxManager({ docker: dead, log, workerId: 'hh' }).acquire({ labels, limits }).catch((e: unknown) => e);
    expect(hostFaultOf(err)).toMatch(/dockerd/);
    expect(await probeHost(dead, defaultImage(), { images: new Set(), taskFiles: new Set() })).toMatch(/^cannot reach dockerd: .*Fix:/);
    expect(await probeHost(new Docker(), defaultImage(), { images: new Set(), taskFiles: new Set() })).toBeUndefined();
  });

  test('the sandbox image removed: a host fault naming the image; the probe passes once it is back', async () => {
    const image = `ratchet-hh-pruned:${process.pid}`;
    const err = await new SandboxManager({ log, workerId: 'hh', image }).acquire({ labels, limits }).catch((e: unknown) => e);
    const fault = hostFaultOf(err);
    expect(fault).toMatch(new RegExp(`sandbox image ${image} not found`));
    const health = new HostHealth();
    health.markSick(fault!, { image });
    expect(await probeHost(new Docker(), defaultImage(), health.targets)).toMatch(new RegExp(`sandbox image ${image} is not on this host.*Fix:`));
    // The operator puts the image back (here: a tag of the sandbox image).
    expect(spawnSync('docker', ['tag', defaultImage(), image]).status).toBe(0);
    try {
      expect(await probeHost(new Docker(), defaultImage(), health.targets)).toBeUndefined();
    } finally {
      spawnSync('docker', ['rmi', image]);
    }
  });

  test('a task file that cannot be read is a host fault; the probe names it until it is there', async () => {
    expect(hostFaultOf(ApplicationFailure.retryable('reading the task file failed: ENOENT', 'TaskReadError'))).toMatch(/ENOENT/);
    // Not a host fault: a task that cannot be set up, or a command that failed in its sandbox.
    expect(hostFaultOf(new Error('task "t1" has no source'))).toBeUndefined();
    expect(hostFaultOf(new Error('No such container: abc'))).toBeUndefined();
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-hh-'));
    const file = path.join(dir, 'train.jsonl');
    const targets = { images: new Set<string>(), taskFiles: new Set([file]) };
    expect(await probeHost(new Docker(), defaultImage(), targets)).toMatch(/task file .*train\.jsonl cannot be read.*Fix:/);
    writeFileSync(file, '{}\n');
    expect(await probeHost(new Docker(), defaultImage(), targets)).toBeUndefined();
  });
});

describe('health records in the store', () => {
  test('fresh unhealthy records are named, oldest first; healthy and stale ones are not', async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-hh-store-')));
    const now = Date.parse('2026-11-28T02:00:00Z');
    const at = (min: number) => new Date(now - min * 60_000).toISOString();
    await store.putJson(healthKey('h1:1'), { workerId: 'h1:1', host: 'h1', healthy: false, error: 'image gone', since: at(3), checkedAt: at(0) });
    await store.putJson(healthKey('h2:1'), { workerId: 'h2:1', host: 'h2', healthy: false, error: 'dockerd down', since: at(4), checkedAt: at(1) });
    await store.putJson(healthKey('h3:1'), { workerId: 'h3:1', host: 'h3', healthy: true, checkedAt: at(0) });
    await store.putJson(healthKey('h4:1'), { workerId: 'h4:1', host: 'h4', healthy: false, error: 'killed while sick', since: at(60), checkedAt: at(30) });
    expect(await unhealthyHosts(store, now)).toEqual([
      { host: 'h2', error: 'dockerd down', since: at(4) },
      { host: 'h1', error: 'image gone', since: at(3) },
    ]);
  });

  test('a record its worker rewrites between exists() and getJson() is read again, not dropped from the view', async () => {
    // rolloutWorkersWait.test.ts's failure in stop 52's CI: the sick host vanished from one check, the watch took it for a change.
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-hh-race-')));
    const now = Date.parse('2026-11-28T02:00:00Z');
    const record = (checkedAt: number) => ({ workerId: 'h1:1', host: 'h1', healthy: false, error: 'image gone', since: new Date(now - 60_000).toISOString(), checkedAt: new Date(checkedAt).toISOString() });
    await store.putJson(healthKey('h1:1'), record(now - 2000));
    let rewrites = 2; // the worker refreshes its record right after each of the first two exists()
    const racing = {
      list: (prefix: string) => store.list(prefix),
      putJson: (key: string, value: unknown) => store.putJson(key, value),
      getJson: <T>(ref: ArtifactRef) => store.getJson<T>(ref),
      exists: async (key: string) => {
        const ref = await store.exists(key);
        if (rewrites-- > 0) await store.putJson(key, record(now - rewrites));
        return ref;
      },
    };
    expect(await unhealthyHosts(racing, now)).toEqual([{ host: 'h1', error: 'image gone', since: new Date(now - 60_000).toISOString() }]);
    expect(rewrites).toBeLessThan(0); // both rewrites happened: the record was read a third time
  });

  test('a record rewritten on every read is given up after a few tries (the next check reads it)', async () => {
    const store = new LocalArtifactStore(mkdtempSync(path.join(os.tmpdir(), 'ratchet-hh-race-')));
    const now = Date.parse('2026-11-28T02:00:00Z');
    let n = 0;
    const write = () => store.putJson(healthKey('h1:1'), { workerId: 'h1:1', host: 'h1', healthy: false, error: 'image gone', checkedAt: new Date(now - ++n).toISOString() });
    await write();
    let reads = 0;
    const racing = {
      list: (prefix: string) => store.list(prefix),
      putJson: (key: string, value: unknown) => store.putJson(key, value),
      getJson: <T>(ref: ArtifactRef) => store.getJson<T>(ref),
      exists: async (key: string) => { reads++; const ref = await store.exists(key); await write(); return ref; },
    };
    expect(await unhealthyHosts(racing, now)).toEqual([]);
    expect(reads).toBe(5);
  });
});

describeWithStack('a worker out of service stops polling until its probe passes (real dev server)', ['temporalBinary'], () => {
  const world = useFakeWorld({ workflowsPath: require.resolve('../../fixtures/workflows/retryActivity') });

  test('the first host fault shuts the worker; no task reaches it while the probe fails; it serves again after', async () => {
    const wfWorker = await Worker.create({ connection: world.env.nativeConnection, taskQueue: 'hh-wf', workflowBundle: world.bundle });
    const wfRunning = wfWorker.run();
    const health = new HostHealth();
    const calls: number[] = [];
    const said: { healthy: boolean; error?: string }[] = [];
    let fixed = false;
    let fixedAt = 0;
    let stop = false;
    let created = 0;
    let current: Worker | undefined;
    const serving = serveWhileHealthy({
      createWorker: () => Worker.create({
        connection: world.env.nativeConnection, taskQueue: 'hh-test', shutdownGraceTime: '1 second', identity: `hh-${++created}`,
        activities: {
          async work() {
            calls.push(Date.now());
            if (!fixed) {
              health.markSick('sandbox image ratchet-sandbox:gone not found in dockerd', { image: 'ratchet-sandbox:gone' });
              throw ApplicationFailure.create({ type: 'RolloutHostUnhealthy', message: 'out of service' });
            }
            return 'ran';
          },
        },
      }).then((w) => (current = w)),
      health,
      probe: async () => (fixed ? undefined : 'sandbox image ratchet-sandbox:gone is not on this host'),
      say: async (r) => { said.push(r); },
      probeMs: 200,
      stopping: () => stop,
      host: 'hh',
      log,
    });
    try {
      const handle = await world.env.client.workflow.start('RetryActivity', { taskQueue: 'hh-wf', workflowId: `hh-${process.pid}` });
      // Out of service: the retries (every 200 ms) find no poller on this host for 3 s.
      await waitFor(() => said.length >= 3);
      await new Promise((r) => setTimeout(r, 3_000));
      expect(calls).toHaveLength(1);
      expect(said[0]).toMatchObject({ healthy: false, error: expect.stringMatching(/not found in dockerd/) });
      expect(said.slice(1).every((s) => !s.healthy && /is not on this host/.test(s.error ?? ''))).toBe(true);
      fixed = true;
      fixedAt = Date.now();
      expect(await handle.result()).toBe('ran');
      expect(calls).toHaveLength(2);
      expect(calls[1]!).toBeGreaterThanOrEqual(fixedAt);
      expect(said.at(-1)).toEqual({ healthy: true });
    } finally {
      stop = true;
      // The worker serving again: shut it as SIGTERM would.
      current?.shutdown();
      await serving.catch(() => undefined);
      wfWorker.shutdown();
      await wfRunning.catch(() => undefined);
    }
  });
});

async function waitFor(pred: () => boolean, timeoutMs = 30_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!pred()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 50));
  }
}
