import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type Docker from 'dockerode';
import pino from 'pino';
import { LocalArtifactStore } from '../../../src/artifacts/store';
import { removalReason, sweep, type RemovalContext, type WorkerState } from '../../../src/sandbox/janitor';
import { LABELS } from '../../../src/sandbox/labels';
import { LeaseKeeper, LeaseStore, leaseKey, leaseState, leaseTimingFromEnv, type WorkerLease } from '../../../src/sandbox/lease';

const log = pino({ level: 'silent' });
const T0 = Date.parse('2025-01-01T03:00:00Z');

function lease(over: Partial<WorkerLease> = {}): WorkerLease {
  return { workerId: 'a:1:aaaaaa', host: 'a', pid: 1, startedAt: '2025-01-01T02:00:00Z', renewedAt: new Date(T0 - 10_000).toISOString(), ttlMs: 60_000, ...over };
}

describe('leaseState', () => {
  it.each<[string, WorkerLease | undefined, string]>([
    ['renewed within its ttl', lease(), 'alive'],
    ['renewed longer ago than its ttl', lease({ renewedAt: new Date(T0 - 61_000).toISOString() }), 'expired'],
    ['released on shutdown, however recent', lease({ releasedAt: new Date(T0).toISOString() }), 'released'],
    ['never written', undefined, 'missing'],
    ['with an unreadable timestamp', lease({ renewedAt: 'yesterday' }), 'expired'],
  ])('a lease %s is %s', (_name, l, state) => {
    expect(leaseState(l, T0)).toBe(state);
  });
});

describe('leaseTimingFromEnv', () => {
  it('defaults to a 60 s lease renewed every 15 s and swept every 30 s', () => {
    expect(leaseTimingFromEnv({})).toEqual({ ttlMs: 60_000, renewMs: 15_000, sweepMs: 30_000 });
  });
  it('takes RATCHET_WORKER_LEASE_TTL_S', () => {
    expect(leaseTimingFromEnv({ RATCHET_WORKER_LEASE_TTL_S: '8' })).toEqual({ ttlMs: 8000, renewMs: 2000, sweepMs: 4000 });
  });
  it.each(['abc', '0', '1', '-5'])('rejects %s, naming the variable and the fix', (raw) => {
    expect(() => leaseTimingFromEnv({ RATCHET_WORKER_LEASE_TTL_S: raw })).toThrow(/RATCHET_WORKER_LEASE_TTL_S=.*seconds >= 2.*Fix:/);
  });
});

describe('janitor removalReason', () => {
  const states: Record<string, WorkerState> = { live: 'alive', dead: 'expired', gone: 'released', nolease: 'missing', unreadable: 'unknown' };
  const ctx: RemovalContext = { now: T0, maxAgeMs: 3600_000, selfId: 'me', workerState: (w) => states[w] ?? 'unknown' };
  const labels = (worker: string, created = '2025-01-01T02:30:00Z') => ({ [LABELS.worker]: worker, [LABELS.created]: created });

  it.each([
    ['a live worker (on any host)', labels('live'), null],
    ['a worker whose lease expired', labels('dead'), 'worker lease expired'],
    ['a worker that shut down', labels('gone'), 'worker shut down'],
    ['a worker with no lease (another deployment, an older Ratchet): left to max age', labels('nolease'), null],
    ['a worker with no lease, past max age', labels('nolease', '2025-01-01T01:00:00Z'), 'older than max age'],
    ['a worker whose lease cannot be read', labels('unreadable'), null],
    ['this worker, whatever its lease says', labels('me'), null],
    ['too old even with a live worker', labels('live', '2025-01-01T01:00:00Z'), 'older than max age'],
    ['no worker label', { [LABELS.created]: '2025-01-01T02:30:00Z' }, 'no worker label'],
  ])('%s', (_name, l, reason) => {
    expect(removalReason(l, ctx)).toBe(reason);
  });
});

describe('worker leases in the artifact store', () => {
  let root: string;
  let leases: LeaseStore;
  beforeEach(async () => {
    root = await fs.mkdtemp(path.join(os.tmpdir(), 'ratchet-leases-'));
    leases = new LeaseStore(new LocalArtifactStore(root));
  });
  afterEach(() => fs.rm(root, { recursive: true, force: true }));

  it('keys a worker id with colons to a safe store key', () => {
    expect(leaseKey('rollout-a:123:0f0f0f')).toBe('workers/leases/rollout-a_123_0f0f0f.json');
  });

  it('a keeper writes the lease at start, renews it, and marks it released at shutdown', async () => {
    let now = T0;
    const keeper = new LeaseKeeper(leases, { workerId: 'rollout-a:7:abcdef', host: 'rollout-a', pid: 7, renewMs: 1000, ttlMs: 4000, now: () => now, log });
    expect(await leases.read('rollout-a:7:abcdef')).toBeUndefined();
    await keeper.start();
    const first = await leases.read('rollout-a:7:abcdef');
    expect(first).toMatchObject({ workerId: 'rollout-a:7:abcdef', host: 'rollout-a', pid: 7, ttlMs: 4000, renewedAt: new Date(T0).toISOString() });
    now = T0 + 5000;
    expect(leaseState(first, now)).toBe('expired');
    await keeper.renew();
    expect(leaseState(await leases.read('rollout-a:7:abcdef'), now)).toBe('alive');
    await keeper.release();
    expect(leaseState(await leases.read('rollout-a:7:abcdef'), now)).toBe('released');
  });

  it('refuses a renewal interval too slow for its ttl', async () => {
    const keeper = new LeaseKeeper(leases, { workerId: 'w', host: 'h', renewMs: 40_000, ttlMs: 60_000, log });
    await expect(keeper.start()).rejects.toThrow(/renew at least twice per ttl/);
  });

  it('sweep removes the containers of expired and released workers, whichever host made them', async () => {
    await leases.write(lease({ workerId: 'rollout-a:1:aaaaaa', renewedAt: new Date(T0 - 5_000).toISOString() }));
    await leases.write(lease({ workerId: 'rollout-b:2:bbbbbb', renewedAt: new Date(T0 - 120_000).toISOString() }));
    await leases.write(lease({ workerId: 'rollout-b:3:cccccc', releasedAt: new Date(T0 - 1000).toISOString() }));
    const created = new Date(T0 - 600_000).toISOString();
    const containers = [
      { Id: 'alive', Labels: { [LABELS.worker]: 'rollout-a:1:aaaaaa', [LABELS.created]: created } },
      { Id: 'expired', Labels: { [LABELS.worker]: 'rollout-b:2:bbbbbb', [LABELS.created]: created } },
      { Id: 'released', Labels: { [LABELS.worker]: 'rollout-b:3:cccccc', [LABELS.created]: created } },
      { Id: 'pid-era', Labels: { [LABELS.worker]: 'rollout-b:99', [LABELS.created]: created } },
      { Id: 'mine', Labels: { [LABELS.worker]: 'me:4:dddddd', [LABELS.created]: created } },
    ];
    const removedIds: string[] = [];
    const docker = {
      listContainers: async () => containers,
      getContainer: (id: string) => ({ remove: async () => { removedIds.push(id); } }),
    } as unknown as Docker;
    const { removed, kept } = await sweep(docker, { leases, selfId: 'me:4:dddddd', now: () => T0, log });
    expect(removed.sort()).toEqual(['expired', 'released']);
    expect(removedIds.sort()).toEqual(removed);
    expect(kept).toBe(3);
  });

  it('sweep keeps everything when the store cannot be read', async () => {
    const broken = new LeaseStore({
      putJson: async () => { throw new Error('store down'); },
      exists: async () => { throw new Error('store down'); },
      getJson: async () => { throw new Error('store down'); },
    });
    const docker = {
      listContainers: async () => [{ Id: 'x', Labels: { [LABELS.worker]: 'rollout-b:2:bbbbbb', [LABELS.created]: new Date(T0 - 600_000).toISOString() } }],
      getContainer: () => ({ remove: async () => { throw new Error('must not remove'); } }),
    } as unknown as Docker;
    expect(await sweep(docker, { leases: broken, now: () => T0, log })).toEqual({ removed: [], kept: 1 });
  });
});
