import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import Docker from 'dockerode';
import pino from 'pino';
import type { SandboxConfig } from '../../src/config/schema';
import { SandboxManager, type Sandbox, type ExecResult, AbortError, sweep, LABELS, defaultImage } from '../../src/sandbox';
import { truncationMarker } from '../../src/sandbox/output';
import { HOST_SLACK_MS } from '../../src/sandbox/exec';
import { paths } from '../../src/shared/paths';
import { baseCommitTar } from '../../src/sandbox/snapshot';
import { LeaseStore } from '../../src/sandbox/lease';
import { LocalArtifactStore } from '../../src/artifacts/store';
import { describeWithDocker } from '../helpers/stack';

const describeDocker = describeWithDocker('sandbox integration tests');

const log = pino({ level: process.env.RATCHET_LOG_LEVEL ?? 'silent' });
const limits: SandboxConfig = {
  memory_mb: 256,
  cpus: 1,
  pids_limit: 64,
  disk_mb: 64,
  exec_timeout_s: 5,
  output_limit_bytes: 4096,
  warm_pool_size: 0,
  max_lifetime_s: 600,
};
const labels = { run: 'itest', step: 0, rollout: 'r0' };

describeDocker('sandbox (real dockerd)', () => {
  const docker = new Docker();
  // A worker id of its own (the default: host, pid and a nonce). Suites run in one jest process, so
  // `host:pid` would be shared with later suites, and the lease the janitor test writes would then
  // expire under their sandboxes: the stack's janitor removed harness.test's container mid-test.
  const manager = new SandboxManager({ docker, log });
  const open: Sandbox[] = [];
  async function acquire(extra: Partial<Parameters<SandboxManager['acquire']>[0]> = {}): Promise<Sandbox> {
    const sb = await manager.acquire({ labels, limits, ...extra });
    open.push(sb);
    return sb;
  }
  /** After anything hostile, the manager must still hand out a working sandbox. */
  async function expectManagerHealthy(): Promise<void> {
    const fresh = await acquire();
    const res = await fresh.exec('echo ok');
    expect(res).toMatchObject({ exitCode: 0, stdout: 'ok\n', timedOut: false });
    await fresh.release();
  }

  afterAll(async () => {
    await Promise.all(open.map((s) => s.release()));
    await manager.close();
  });

  describe('hardening', () => {
    let sb: Sandbox;
    beforeAll(async () => {
      process.env.RATCHET_TEST_SECRET = 'hunter2';
      sb = await acquire();
    });

    it('runs as uid 1000 with no capabilities', async () => {
      expect((await sb.exec('id -u; id -g')).stdout).toBe('1000\n1000\n');
      const caps = await sb.exec('grep -E "^Cap(Eff|Prm|Bnd)" /proc/self/status');
      expect(caps.stdout).toMatch(/CapEff:\s+0{16}/);
      expect(caps.stdout).toMatch(/CapPrm:\s+0{16}/);
      expect(caps.stdout).toMatch(/CapBnd:\s+0{16}/);
      expect((await sb.exec('grep NoNewPrivs /proc/self/status')).stdout).toMatch(/NoNewPrivs:\s+1/);
    });

    it('has no network', async () => {
      const res = await sb.exec(`python3 -c "import socket; socket.create_connection(('1.1.1.1', 53), 2)"`);
      expect(res.exitCode).not.toBe(0);
      expect(res.stderr).toMatch(/Network is unreachable|OSError/);
      expect((await sb.exec('cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " "')).stdout.trim()).toBe('lo');
    });

    it('can write only under /work and /tmp', async () => {
      for (const p of ['/x', '/etc/x', '/usr/bin/x', '/src/x']) {
        const res = await sb.exec(`touch ${p}`);
        expect(res.exitCode).not.toBe(0);
        expect(res.stderr).toMatch(/Read-only file system|No such file|Permission denied/);
      }
      expect((await sb.exec('touch /work/ok /tmp/ok && echo written')).stdout).toBe('written\n');
    });

    it('sees no docker socket, no host mounts and none of the worker environment', async () => {
      expect((await sb.exec('test -e /var/run/docker.sock || test -e /run/docker.sock; echo $?')).stdout).toBe('1\n');
      expect((await sb.exec('env')).stdout).not.toMatch(/RATCHET_TEST_SECRET|hunter2/);
      const info = await docker.getContainer(sb.id).inspect();
      expect(info.Mounts).toEqual([]);
      expect(info.HostConfig).toMatchObject({ NetworkMode: 'none', CapDrop: ['ALL'], ReadonlyRootfs: true, PidsLimit: 64, Memory: 256 * 2 ** 20, MemorySwap: 256 * 2 ** 20 });
    });
  });

  describe('hostile commands are contained', () => {
    const timed = async (sb: Sandbox, cmd: string, timeoutMs?: number): Promise<ExecResult & { wallMs: number }> => {
      const t0 = Date.now();
      const res = await sb.exec(cmd, timeoutMs ? { timeoutMs } : {});
      return { ...res, wallMs: Date.now() - t0 };
    };

    it('network egress fails', async () => {
      const sb = await acquire();
      const res = await sb.exec(`python3 -c "import urllib.request; urllib.request.urlopen('http://1.1.1.1', timeout=2)"`);
      expect(res.exitCode).not.toBe(0);
      await sb.release();
      await expectManagerHealthy();
    });

    it('a fork bomb hits the pid limit and the exec returns', async () => {
      const sb = await acquire();
      const res = await timed(sb, ':(){ :|:& };:; sleep 3', 4000);
      expect(res.wallMs).toBeLessThan(4000 + HOST_SLACK_MS);
      // The pid cgroup counts how often a fork was refused at the limit.
      const events = await sb.exec('cat /sys/fs/cgroup/pids/pids.events 2>/dev/null || cat /sys/fs/cgroup/pids.events');
      expect(Number(/max (\d+)/.exec(events.stdout)?.[1])).toBeGreaterThan(0);
      const after = await sb.exec('ps -e --no-headers | wc -l');
      expect(after.exitCode).toBe(0);
      expect(Number(after.stdout)).toBeLessThan(10); // the bomb's processes died with its exec
      await sb.release();
      await expectManagerHealthy();
    });

    it('a memory hog is killed', async () => {
      const sb = await acquire();
      const res = await sb.exec('python3 -c "b = bytearray(600 * 1024 * 1024); print(len(b))"');
      expect(res.exitCode).not.toBe(0);
      expect(res.timedOut).toBe(false);
      expect(res.stdout).not.toContain('629145600');
      expect((await sb.exec('echo alive')).stdout).toBe('alive\n');
      await sb.release();
      await expectManagerHealthy();
    });

    it('filling the disk stops at disk_mb', async () => {
      const sb = await acquire();
      const res = await sb.exec('dd if=/dev/zero of=/work/big bs=1M count=200');
      expect(res.exitCode).not.toBe(0);
      expect(res.stderr).toMatch(/No space left on device|File size limit exceeded/);
      const size = Number((await sb.exec('stat -c %s /work/big')).stdout);
      expect(size).toBeLessThanOrEqual(64 * 2 ** 20);
      expect(size).toBeGreaterThan(32 * 2 ** 20);
      const yes = await sb.exec('yes > /work/big2');
      expect(yes.stderr).toMatch(/No space left on device|File size limit exceeded/);
      expect((await sb.exec('rm /work/big /work/big2 && echo freed')).stdout).toBe('freed\n');
      await sb.release();
      await expectManagerHealthy();
    });

    it('endless output is truncated with a marker and returns by the timeout', async () => {
      const sb = await acquire();
      const res = await timed(sb, 'yes', 3000);
      expect(res.truncated).toBe(true);
      expect(res.stdout.endsWith(truncationMarker(4096))).toBe(true);
      expect(Buffer.byteLength(res.stdout)).toBe(4096 + Buffer.byteLength(truncationMarker(4096)));
      expect(res.wallMs).toBeLessThan(3000 + 2000);
      await sb.release();
      await expectManagerHealthy();
    });

    it('a command past its timeout is killed with its whole process group', async () => {
      const sb = await acquire();
      const res = await timed(sb, 'sleep 1000 & sleep 1000', 2000);
      expect(res).toMatchObject({ timedOut: true, exitCode: 137 });
      expect(res.wallMs).toBeGreaterThanOrEqual(2000);
      expect(res.wallMs).toBeLessThan(2000 + 1500);
      expect((await sb.exec('ps -eo args= | grep -cx "sleep 1000" || true')).stdout.trim()).toBe('0');
      await sb.release();
      await expectManagerHealthy();
    });

    it('a process that escapes the group cannot hold the exec open past the host deadline', async () => {
      const sb = await acquire();
      const res = await timed(sb, 'setsid sleep 1000 & echo started', 1000);
      expect(res.stdout).toBe('started\n');
      expect(res.wallMs).toBeLessThan(1000 + HOST_SLACK_MS + 1000);
      await sb.release();
      await expectManagerHealthy();
    });
  });

  describe('background processes end with the command that started them', () => {
    /** Processes in the sandbox whose command line contains marker, seen from a later exec. */
    const survivors = async (sb: Sandbox, marker: string): Promise<number> =>
      Number((await sb.exec(`ps -eo args= | grep -F -- ${JSON.stringify(marker)} | grep -vc grep || true`)).stdout.trim());

    it.each([
      ['nohup ... &', 'nohup sh -c "while :; do :; done; echo nohup-loop" >/dev/null 2>&1 & echo started', 'nohup-loop'],
      ['setsid (a new session)', 'setsid sh -c "while :; do :; done; echo setsid-loop" </dev/null >/dev/null 2>&1 & echo started', 'setsid-loop'],
      ['a double fork', '( ( exec -a double-fork-sleep sleep 1000 </dev/null >/dev/null 2>&1 & ) & ) ; echo started', 'double-fork-sleep'],
      ['setsid + nohup + disown', 'setsid nohup bash -c "exec -a disowned-sleep sleep 1000" </dev/null >/dev/null 2>&1 & disown; echo started', 'disowned-sleep'],
    ])('%s: the command returns at once and nothing of it runs afterwards', async (_name, cmd, marker) => {
      const sb = await acquire();
      const t0 = Date.now();
      const res = await sb.exec(cmd, { timeoutMs: 10_000 });
      expect(res).toMatchObject({ exitCode: 0, stdout: 'started\n', timedOut: false });
      expect(Date.now() - t0).toBeLessThan(5_000);
      expect(await survivors(sb, marker)).toBe(0);
      // No core held: a later command gets its CPU time at once.
      const load = await sb.exec('ps -eo pcpu=,args= | sort -rn | head -1');
      expect(load.stdout).not.toMatch(/while|sleep 1000/);
      await sb.release();
      await expectManagerHealthy();
    });

    it('a detached fork bomb does not break later commands', async () => {
      const sb = await acquire();
      const res = await sb.exec('setsid bash -c \':(){ :|:& };:\' </dev/null >/dev/null 2>&1 & sleep 1; echo started', { timeoutMs: 10_000 });
      expect(res.stdout).toBe('started\n');
      for (let i = 0; i < 3; i++) {
        const next = await sb.exec('echo alive; ps -e --no-headers | wc -l');
        expect(next.exitCode).toBe(0);
        const [alive, count] = next.stdout.trim().split('\n');
        expect(alive).toBe('alive');
        expect(Number(count)).toBeLessThan(10);
      }
      await sb.release();
      await expectManagerHealthy();
    });

    it('the keeper survives the sweep: the sandbox stays up across many execs', async () => {
      const sb = await acquire();
      for (let i = 0; i < 5; i++) expect((await sb.exec(`sleep 0.1 & echo ${i}`)).stdout).toBe(`${i}\n`);
      await sb.release();
    });
  });

  describe('cancellation', () => {
    it('aborting an exec rejects promptly', async () => {
      const sb = await acquire();
      const ctl = new AbortController();
      setTimeout(() => ctl.abort(), 300);
      const t0 = Date.now();
      await expect(sb.exec('sleep 30', { signal: ctl.signal })).rejects.toBeInstanceOf(AbortError);
      expect(Date.now() - t0).toBeLessThan(3000);
      expect((await sb.exec('echo still-usable')).stdout).toBe('still-usable\n');
      await new Promise((r) => setTimeout(r, 300)); // the host-side kill runs detached
      expect((await sb.exec('ps -eo args= | grep -cx "sleep 30" || true')).stdout.trim()).toBe('0');
      await sb.release();
    });

    it('release works mid-exec, twice, and later execs fail clearly', async () => {
      const sb = await acquire();
      const running = sb.exec('sleep 30').catch((e: unknown) => e);
      await new Promise((r) => setTimeout(r, 300));
      const t0 = Date.now();
      await Promise.all([sb.release(), sb.release()]);
      await running;
      expect(Date.now() - t0).toBeLessThan(5000);
      await expect(docker.getContainer(sb.id).inspect()).rejects.toMatchObject({ statusCode: 404 });
      await expect(sb.exec('true')).rejects.toThrow(/was released/);
      await sb.release();
    });

    it('an aborted acquire leaves no container behind', async () => {
      const ctl = new AbortController();
      ctl.abort();
      await expect(manager.acquire({ labels, limits, signal: ctl.signal })).rejects.toBeInstanceOf(AbortError);
    });
  });

  describe('labels and janitor', () => {
    it('labels cold containers with run, step, rollout, worker and creation time', async () => {
      const sb = await acquire({ labels: { run: 'itest-labels', step: 7, rollout: 'g1-r3' } });
      const info = await docker.getContainer(sb.id).inspect();
      expect(info.Config.Labels).toMatchObject({
        [LABELS.run]: 'itest-labels',
        [LABELS.step]: '7',
        [LABELS.rollout]: 'g1-r3',
        [LABELS.worker]: manager.workerId,
      });
      expect(manager.workerId).toMatch(new RegExp(`^${os.hostname()}:${process.pid}:[0-9a-f]{6}$`));
      expect(Date.now() - Date.parse(info.Config.Labels[LABELS.created]!)).toBeLessThan(60_000);
      expect(info.Name).toMatch(/^\/ratchet-itest-labels-s7-g1-r3-[0-9a-f]{6}$/);
      await sb.release();
    });

    it("removes the containers of a worker whose lease expired and keeps a live worker's", async () => {
      // The store every worker of this machine writes its lease to: the stack's own
      // rollout worker's lease is there too, so its sandboxes stay.
      const leases = new LeaseStore(new LocalArtifactStore(paths.artifacts()));
      const now = Date.now();
      const lease = (workerId: string, renewedAt: number) =>
        leases.write({ workerId, host: os.hostname(), pid: process.pid, startedAt: new Date(now - 600_000).toISOString(), renewedAt: new Date(renewedAt).toISOString(), ttlMs: 60_000 });
      const ghostId = `ghost-${process.pid}:1:${now.toString(16).slice(-6)}`;
      await lease(ghostId, now - 120_000); // last renewed two minutes ago: its worker is gone
      // The live worker is a manager of this test alone: its lease expires a minute from now,
      // and the stack's janitor would then sweep whatever that worker still had.
      const live = new SandboxManager({ docker, log });
      await lease(live.workerId, now);
      const ghost = new SandboxManager({ docker, log, workerId: ghostId });
      const orphan = await ghost.acquire({ labels, limits });
      const mine = await live.acquire({ labels, limits });
      const { removed } = await sweep(docker, { leases, log });
      expect(removed).toContain(orphan.id);
      expect(removed).not.toContain(mine.id);
      await expect(docker.getContainer(orphan.id).inspect()).rejects.toMatchObject({ statusCode: 404 });
      await mine.release();
    });

    it('removes containers older than the max age', async () => {
      const sb = await acquire();
      const leases = new LeaseStore(new LocalArtifactStore(paths.artifacts()));
      const { removed } = await sweep(docker, { leases, log, now: () => Date.now() + 10 * 3600_000 });
      expect(removed).toContain(sb.id);
    });
  });

  describe('warm pool', () => {
    it('serves an acquire from the pool, names it for the rollout and refills', async () => {
      const pooled = { ...limits, warm_pool_size: 1 };
      const pm = new SandboxManager({ docker, log });
      try {
        await pm.warm(pooled);
        const sb = await pm.acquire({ labels: { run: 'itest-pool', step: 1, rollout: 'r9' }, limits: pooled });
        expect(pm.lastSource).toBe('pool');
        expect((await docker.getContainer(sb.id).inspect()).Name).toMatch(/^\/ratchet-itest-pool-s1-r9-/);
        expect((await sb.exec('id -u && touch /x 2>/dev/null || echo ro')).stdout).toBe('1000\nro\n');
        await sb.release();
        await pm.warm(pooled);
        const warmOnes = await docker.listContainers({ all: true, filters: { label: [`${LABELS.pool}=warm`, `${LABELS.worker}=${pm.workerId}`] } });
        expect(warmOnes).toHaveLength(1);
      } finally {
        await pm.close();
      }
      const left = await docker.listContainers({ all: true, filters: { label: [`${LABELS.pool}=warm`, `${LABELS.worker}=${pm.workerId}`] } });
      expect(left).toHaveLength(0);
    });
  });

  describe('repository at the base commit', () => {
    let snapshot: string;
    let base: string;
    let later: string;
    beforeAll(() => {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ratchet-sbx-repo-'));
      const git = (...args: string[]) => execFileSync('git', ['-C', path.join(dir, 'w'), ...args], { encoding: 'utf8' }).trim();
      fs.mkdirSync(path.join(dir, 'w', 'pkg'), { recursive: true });
      execFileSync('git', ['init', '-q', '-b', 'main', path.join(dir, 'w')]);
      fs.writeFileSync(path.join(dir, 'w', 'pkg', 'calc.py'), 'def add(a, b):\n    return a - b\n');
      fs.writeFileSync(path.join(dir, 'w', 'test_calc.py'), 'from pkg.calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n');
      git('add', '-A');
      git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-m', 'base');
      base = git('rev-parse', 'HEAD');
      fs.writeFileSync(path.join(dir, 'w', 'pkg', 'calc.py'), 'def add(a, b):\n    return a + b\n');
      git('-c', 'user.name=t', '-c', 'user.email=t@t', 'commit', '-q', '-am', 'later');
      later = git('rev-parse', 'HEAD');
      snapshot = path.join(dir, 'pkg-1.0.git');
      execFileSync('git', ['clone', '-q', '--bare', path.join(dir, 'w'), snapshot]);
    });

    it('checks out the base commit in /work/repo and diffs the work tree, new files included', async () => {
      const sb = await acquire({ repo: { hostPath: snapshot, baseCommit: base } });
      expect((await sb.exec('pwd; git rev-parse HEAD; git status --porcelain')).stdout).toBe(`/work/repo\n${base}\n`);
      // Only the base commit: no later commit (the fix), no refs, no history to mine.
      expect((await sb.exec('git rev-list --all HEAD | wc -l; git for-each-ref | wc -l')).stdout).toBe('1\n0\n');
      expect((await sb.exec(`git cat-file -e ${later} 2>/dev/null && echo present || echo absent`)).stdout).toBe('absent\n');
      expect((await sb.exec('ls .git/hooks 2>/dev/null | wc -l; grep -rl /tmp/ratchet-sbx .git | wc -l')).stdout).toBe('0\n0\n');
      expect(await sb.readFile('pkg/calc.py')).toContain('return a - b');
      const pytest = await sb.exec('python3 -m pytest -q test_calc.py');
      expect(pytest.exitCode).toBe(1);
      expect(await sb.diff()).toBe('');

      await sb.writeFile('pkg/calc.py', 'def add(a, b):\n    return a + b\n');
      await sb.writeFile('pkg/new/helper.py', 'X = 1\n');
      await sb.exec('mkdir -p pkg/__pycache__ && echo junk > pkg/__pycache__/calc.cpython-311.pyc');
      expect((await sb.exec('python3 -m pytest -q test_calc.py')).exitCode).toBe(0);
      const diff = await sb.diff();
      expect(diff).toContain('-    return a - b\n+    return a + b');
      expect(diff).toContain('+++ b/pkg/new/helper.py');
      expect(diff).not.toContain('__pycache__');
      expect((await sb.exec('git status --porcelain')).stdout).toContain('?? pkg/new/'); // the agent's index is untouched

      // The diff applies cleanly to a fresh checkout of the base commit.
      const check = await acquire({ repo: { hostPath: snapshot, baseCommit: base } });
      await check.writeFile('/tmp/fix.patch', diff);
      expect((await check.exec('git apply /tmp/fix.patch && python3 -m pytest -q test_calc.py')).exitCode).toBe(0);
      await Promise.all([sb.release(), check.release()]);
    });

    it('runs a real task from the generated set: FAIL_TO_PASS fails at base, passes with the gold patch', async () => {
      const tasks = path.join(paths.tasks(), 'train.jsonl');
      if (!fs.existsSync(tasks)) {
        console.warn(`SKIPPING real-task check: ${tasks} is missing. Fix: bash infra/tasks.sh`);
        return;
      }
      const row = JSON.parse(fs.readFileSync(tasks, 'utf8').split('\n')[0]!) as {
        base_commit: string; patch: string; FAIL_TO_PASS: string[]; test_cmd: string; source: { repo_path: string };
      };
      const hostPath = path.join(paths.tasks(), row.source.repo_path);
      const sb = await acquire({ repo: { hostPath, baseCommit: row.base_commit }, limits: { ...limits, exec_timeout_s: 60 } });
      const tests = row.FAIL_TO_PASS.map((t) => `'${t}'`).join(' ');
      expect((await sb.exec(`${row.test_cmd} ${tests}`)).exitCode).toBe(1);
      await sb.writeFile('/tmp/gold.patch', row.patch);
      const fixed = await sb.exec(`git apply /tmp/gold.patch && ${row.test_cmd} ${tests}`);
      expect(fixed.exitCode).toBe(0);
      expect(await sb.diff()).toBe(row.patch);
      await sb.release();
    });

    it('a task image that ships its repository (SWE-bench /testbed style) is copied to /work/repo at the base commit', async () => {
      // Build such an image here, from the sandbox image: the repository at /testbed, owned by root.
      const tag = `ratchet-test-image-task:${base.slice(0, 12)}`;
      const builder = await docker.createContainer({ Image: defaultImage(), User: '0:0', Cmd: ['sleep', 'infinity'], NetworkDisabled: true });
      try {
        await builder.start();
        const sh = async (cmd: string) => {
          const exec = await builder.exec({ Cmd: ['sh', '-c', cmd], AttachStdout: true, AttachStderr: true });
          const stream = await exec.start({});
          await new Promise((r) => { stream.on('end', r); stream.resume(); });
          expect((await exec.inspect()).ExitCode).toBe(0);
        };
        // baseCommitTar is a git dir's content: it becomes /testbed/.git, checked out at the base commit.
        await sh('mkdir -p /testbed/.git');
        await builder.putArchive(await baseCommitTar({ hostPath: snapshot, baseCommit: base }), { path: '/testbed/.git' });
        await sh(`cd /testbed && git config core.bare false && git checkout -q -f ${base} && chmod -R a+rX /testbed`);
        await builder.commit({ repo: tag.split(':')[0], tag: tag.split(':')[1] });
      } finally {
        await builder.remove({ force: true });
      }
      try {
        const sb = await acquire({ image: tag, imageRepo: { dir: '/testbed', baseCommit: base } });
        expect((await sb.exec('pwd; git rev-parse HEAD; git status --porcelain')).stdout).toBe(`/work/repo\n${base}\n`);
        await sb.writeFile('pkg/calc.py', 'def add(a, b):\n    return a + b\n');
        expect((await sb.exec('python3 -m pytest -q test_calc.py')).exitCode).toBe(0);
        expect(await sb.diff()).toContain('-    return a - b\n+    return a + b');
        // The image's copy is untouched: the root filesystem stays read-only.
        expect((await sb.exec('cat /testbed/pkg/calc.py; touch /testbed/x 2>&1 | grep -c "Read-only"')).stdout).toBe('def add(a, b):\n    return a - b\n1\n');
        await sb.release();
        await expect(acquire({ image: tag, imageRepo: { dir: '/nowhere', baseCommit: base } })).rejects.toThrow(/no git repository at \/nowhere/);
        await expect(acquire({ image: tag, imageRepo: { dir: '/testbed', baseCommit: 'f'.repeat(40) } })).rejects.toThrow(/not in the image's repository/);
      } finally {
        await docker.getImage(tag).remove({ force: true }).catch(() => undefined);
      }
    });

    it('rejects bad repo specs with the field named', async () => {
      await expect(manager.acquire({ labels, limits, repo: { hostPath: '/nonexistent', baseCommit: base } })).rejects.toThrow(/repo.hostPath/);
      await expect(manager.acquire({ labels, limits, repo: { hostPath: snapshot, baseCommit: 'main' } })).rejects.toThrow(/repo.baseCommit/);
      await expect(manager.acquire({ labels, limits, repo: { hostPath: snapshot, baseCommit: 'deadbeef'.repeat(5) } })).rejects.toThrow(/not in the snapshot/);
      await expect(manager.acquire({ labels, limits, repo: { hostPath: snapshot, baseCommit: base.slice(0, 12) } })).rejects.toThrow(/full 40- or 64-hex/);
    });
  });
});
