/**
 * The sandbox's hard lifetime and its cost figures, on this host's dockerd and the real sandbox image
 * (a few labelled containers, removed at the end). Skips loudly when dockerd or the image is missing;
 * fails instead under RATCHET_REQUIRE_STACK=1.
 *
 * - Lifetime: a sandbox made with max_lifetime_s = 3 exits by itself within a few seconds with no
 *   worker involved (the manager and its process are out of the picture: nothing calls release).
 * - Usage: release() reads Docker's own records: container-seconds equal `docker inspect`'s
 *   FinishedAt − StartedAt, and a CPU-bound exec shows as CPU-seconds.
 */
import { spawnSync } from 'node:child_process';
import Docker from 'dockerode';
import pino from 'pino';
import { RunConfig } from '../../../src/config/schema';
import { SandboxManager } from '../../../src/sandbox';
import { DockerSandbox } from '../../../src/sandbox/sandbox';
import { meterSandboxes } from '../../../src/rollouts/cost';
import { describeWithDocker } from '../../helpers/stack';

const describeDocker = describeWithDocker('sandbox lifetime tests');
jest.setTimeout(60_000);

const log = pino({ level: 'silent' });
const RUN = `lifetime-test-${process.pid}`;
const base = { ...RunConfig.parse({ env: [{ id: 'swe-grep' }] }).sandbox, memory_mb: 256, disk_mb: 64, warm_pool_size: 0 };

describeDocker('sandbox hard lifetime and usage (real dockerd)', () => {
  const docker = new Docker();

  afterAll(async () => {
    const left = await docker.listContainers({ all: true, filters: { label: [`ratchet.run=${RUN}`] } });
    await Promise.all(left.map((c) => docker.getContainer(c.Id).remove({ force: true }).catch(() => undefined)));
  });

  test('a sandbox with a 3 s lifetime exits by itself, with no worker doing anything', async () => {
    const manager = new SandboxManager({ log });
    const sandbox = await manager.acquire({ labels: { run: RUN, step: 0, rollout: 'life' }, limits: { ...base, max_lifetime_s: 3 } });
    const c = docker.getContainer(sandbox.id);
    const first = await c.inspect();
    expect(first.State.Running).toBe(true);
    expect(first.Config.Labels['ratchet.max-lifetime-s']).toBe('3');
    // The hardening is unchanged by the lifetime.
    expect(first.HostConfig.NetworkMode).toBe('none');
    expect(first.HostConfig.CapDrop).toEqual(['ALL']);
    expect(first.HostConfig.ReadonlyRootfs).toBe(true);
    // Wait past the lifetime without calling anything on the sandbox or the manager.
    const deadline = Date.now() + 15_000;
    let state = first.State;
    while (state.Running && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 250));
      state = (await c.inspect()).State;
    }
    expect(state.Running).toBe(false);
    // Exit code 0: its sleep ended (a kill by anyone would read 137).
    expect(state.ExitCode).toBe(0);
    const lived = (Date.parse(state.FinishedAt) - Date.parse(state.StartedAt)) / 1000;
    expect(lived).toBeGreaterThanOrEqual(2.9);
    expect(lived).toBeLessThan(6);
    // Released after it died: still counted, with Docker's figures, and removed.
    await sandbox.release();
    expect((sandbox as DockerSandbox).usage()?.container_s).toBeCloseTo(lived, 2);
    await expect(c.inspect()).rejects.toMatchObject({ statusCode: 404 });
  });

  test('release measures Docker\'s container-seconds and the cgroup\'s CPU-seconds; the meter sums a rollout\'s sandboxes', async () => {
    const meter = meterSandboxes(new SandboxManager({ log }));
    const spec = { labels: { run: RUN, step: 0, rollout: 'usage' }, limits: { ...base, cpus: 1, max_lifetime_s: 120 } };
    const busy = await meter.acquire(spec);
    // A busy loop; the shell's own `times` (user and system time of the shell) is the independent figure.
    const execStart = performance.now();
    const r = await busy.exec('end=$((SECONDS+2)); while [ $SECONDS -lt $end ]; do :; done; times', { timeoutMs: 10_000 });
    // The loop ends when bash's whole-second clock ticks twice: after 1 to 2 s, so the exec's own
    // wall time (measured here, not by Docker) is the floor for how long the container lived.
    const execS = (performance.now() - execStart) / 1000;
    const shellCpu = [...r.stdout.split('\n')[0]!.matchAll(/(\d+)m([\d.]+)s/g)].reduce((a, m) => a + Number(m[1]) * 60 + Number(m[2]), 0);
    expect(shellCpu).toBeGreaterThan(0.2);
    const id = (busy as DockerSandbox).id;
    // Docker's own record, read independently just before release removes the container.
    const idle = await meter.acquire(spec);
    await busy.release();
    const u = (busy as unknown as DockerSandbox).usage()!;
    // The cgroup counts the shell and everything else in the container (tini, sleep, the exec's wrapper).
    expect(u.cpu_s).toBeGreaterThanOrEqual(shellCpu - 0.02);
    expect(u.cpu_s).toBeLessThan(shellCpu + 0.5);
    expect(u.cpu_s).toBeLessThan(u.container_s + 0.1);
    expect(execS).toBeGreaterThan(0.9);
    expect(u.container_s).toBeGreaterThan(execS - 0.05);
    await expect(docker.getContainer(id).inspect()).rejects.toMatchObject({ statusCode: 404 });
    await idle.release();
    await idle.release(); // twice: counted once
    const v = (idle as unknown as DockerSandbox).usage()!;
    expect(v.cpu_s).toBeLessThan(0.5);
    const cost = meter.cost();
    expect(cost.containers).toBe(2);
    expect(cost.container_s).toBeCloseTo(u.container_s + v.container_s, 2);
    expect(cost.cpu_s).toBeCloseTo(u.cpu_s + v.cpu_s, 2);
  });

  test('container-seconds match docker events\' start and die times', async () => {
    const since = Math.floor(Date.now() / 1000) - 1;
    const manager = new SandboxManager({ log });
    const s = await manager.acquire({ labels: { run: RUN, step: 1, rollout: 'events' }, limits: { ...base, max_lifetime_s: 120 } });
    await new Promise((r) => setTimeout(r, 1500));
    await s.release();
    const until = Math.ceil(Date.now() / 1000) + 1;
    const out = spawnSync('docker', ['events', '--since', String(since), '--until', String(until), '--filter', `container=${s.id}`, '--format', '{{json .}}'], { encoding: 'utf8', timeout: 20_000 });
    const events = out.stdout.trim().split('\n').filter(Boolean).map((l) => JSON.parse(l) as { status?: string; Action?: string; timeNano: number });
    const at = (a: string) => events.find((e) => (e.Action ?? e.status) === a)?.timeNano;
    const start = at('start');
    const die = at('die');
    expect(start).toBeDefined();
    expect(die).toBeDefined();
    const byEvents = (die! - start!) / 1e9;
    const measured = (s as DockerSandbox).usage()!.container_s;
    expect(Math.abs(measured - byEvents) / byEvents).toBeLessThan(0.05);
  });
});
