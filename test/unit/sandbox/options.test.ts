import { buildCreateOptions, poolKey } from '../../../src/sandbox/options';
import { containerName, currentWorkerId } from '../../../src/sandbox/labels';
import { wrapArgv } from '../../../src/sandbox/exec';

const limits = { memory_mb: 512, cpus: 1.5, pids_limit: 128, disk_mb: 256 };

describe('buildCreateOptions', () => {
  const opts = buildCreateOptions({ image: 'ratchet-sandbox:abc', limits, labels: { 'ratchet.run': 'r1' }, name: 'ratchet-r1-s0-a' });

  it('produces exactly the hardened HostConfig', () => {
    expect(opts.HostConfig).toEqual({
      NetworkMode: 'none',
      CapDrop: ['ALL'],
      SecurityOpt: ['no-new-privileges'],
      Privileged: false,
      ReadonlyRootfs: true,
      Init: true,
      Tmpfs: {
        '/work': 'rw,nosuid,nodev,size=256m,uid=1000,gid=1000,mode=0755',
        '/tmp': 'rw,nosuid,nodev,size=64m,mode=1777',
      },
      Binds: [],
      Mounts: [],
      Memory: 512 * 1024 * 1024,
      MemorySwap: 512 * 1024 * 1024,
      NanoCpus: 1_500_000_000,
      PidsLimit: 128,
      Ulimits: [
        { Name: 'nofile', Soft: 1024, Hard: 1024 },
        { Name: 'fsize', Soft: 256 * 1024 * 1024, Hard: 256 * 1024 * 1024 },
        { Name: 'core', Soft: 0, Hard: 0 },
      ],
      IpcMode: 'private',
      LogConfig: { Type: 'none', Config: {} },
      RestartPolicy: { Name: 'no' },
      AutoRemove: false,
    });
  });

  it('runs as the agent with no environment of the worker and no network', () => {
    process.env.RATCHET_TEST_SECRET = 'hunter2';
    const again = buildCreateOptions({ image: 'i', limits, labels: {} });
    expect(again.Env).toEqual([]);
    expect(JSON.stringify(again)).not.toContain('hunter2');
    expect(opts.User).toBe('1000:1000');
    expect(opts.NetworkDisabled).toBe(true);
    // The hard lifetime: tini's child sleeps the container's lifetime, then the container exits by itself.
    expect(opts.Cmd).toEqual(['sleep', '3600']);
    expect(opts.Labels).toEqual({ 'ratchet.run': 'r1', 'ratchet.max-lifetime-s': '3600' });
    const short = buildCreateOptions({ image: 'i', limits: { ...limits, max_lifetime_s: 90 }, labels: {} });
    expect([short.Cmd, short.Labels]).toEqual([['sleep', '90'], { 'ratchet.max-lifetime-s': '90' }]);
    expect(buildCreateOptions({ image: 'i', limits: { ...limits, max_lifetime_s: 90 }, labels: {}, lifetimeS: 690 }).Cmd).toEqual(['sleep', '690']);
    expect(opts.name).toBe('ratchet-r1-s0-a');
    expect(JSON.stringify(opts)).not.toContain('docker.sock');
  });

  it('keys pools by image and every limit baked into the container', () => {
    expect(poolKey('i', limits)).toBe(poolKey('i', { ...limits }));
    expect(poolKey('i', limits)).not.toBe(poolKey('i', { ...limits, disk_mb: 128 }));
    expect(poolKey('i', limits)).not.toBe(poolKey('j', limits));
    expect(poolKey('i', limits)).not.toBe(poolKey('i', { ...limits, max_lifetime_s: 60 }));
  });
});

describe('labels', () => {
  it('names this worker by host, pid and a nonce (a restart with the same pid is another worker)', () => {
    const saved = process.env.RATCHET_HOST_NAME;
    process.env.RATCHET_HOST_NAME = 'rollout-a';
    try {
      const a = currentWorkerId();
      expect(a).toMatch(new RegExp(`^rollout-a:${process.pid}:[0-9a-f]{6}$`));
      expect(currentWorkerId()).not.toBe(a);
    } finally {
      if (saved === undefined) delete process.env.RATCHET_HOST_NAME;
      else process.env.RATCHET_HOST_NAME = saved;
    }
  });

  it('makes valid container names from any run id', () => {
    expect(containerName({ run: 'my run/1', step: 3, rollout: 'g0:r2' }, 'ab12')).toBe('ratchet-my-run-1-s3-g0-r2-ab12');
  });
});

describe('wrapArgv', () => {
  it('puts the command under timeout -s KILL with the deadline in seconds', () => {
    const argv = wrapArgv(['bash', '-lc', 'echo hi'], 1500);
    expect(argv.slice(0, 2)).toEqual(['bash', '-c']);
    expect(argv[2]).toContain('timeout -s KILL "$1" "${@:2}"');
    expect(argv[2]).toContain('kill -$sig "$p"'); // after the command, every leftover process of the sandbox is swept
    expect(argv.slice(3)).toEqual(['ratchet-exec', '1.500', 'bash', '-lc', 'echo hi']);
  });

  it('rejects a non-positive timeout', () => {
    expect(() => wrapArgv(['true'], 0)).toThrow(/positive/);
  });
});
