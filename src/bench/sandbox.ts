/**
 * Sandbox latencies on the local dockerd: container create, start, exec
 * (`true` through the timeout wrapper) and remove, each p50/p95 over N runs;
 * then acquire() cold vs from a full warm pool, empty and with a task's
 * repository at its base commit (the first row of the task set, if present).
 * Cold and pool runs alternate, so load drift hits both alike.
 *   npm run bench:sandbox [-- --runs 50]
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { performance } from 'node:perf_hooks';
import Docker from 'dockerode';
import pino from 'pino';
import { RunConfig } from '../config/schema';
import { paths } from '../shared/paths';
import { SandboxManager } from '../sandbox';
import { runExec } from '../sandbox/exec';
import { buildCreateOptions, defaultImage } from '../sandbox/options';
import { clearSnapshotCache, type RepoSpec } from '../sandbox/snapshot';

const runs = Number(process.argv[process.argv.indexOf('--runs') + 1] || 50) || 50;
const log = pino({ level: 'warn' });
const limits = RunConfig.parse({ env: [{ id: 'swe-grep' }] }).sandbox;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)]!;
}
const fmt = (xs: number[]) => ({ p50: +pct(xs, 50).toFixed(1), p95: +pct(xs, 95).toFixed(1) });

async function time<T>(xs: number[], fn: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  const out = await fn();
  xs.push(performance.now() - t0);
  return out;
}

function firstTask(): RepoSpec | undefined {
  const file = path.join(paths.tasks(), 'train.jsonl');
  if (!fs.existsSync(file)) return undefined;
  const row = JSON.parse(fs.readFileSync(file, 'utf8').split('\n')[0]!) as { base_commit: string; source: { repo_path: string } };
  return { hostPath: path.join(paths.tasks(), row.source.repo_path), baseCommit: row.base_commit };
}

async function lifecycle(docker: Docker) {
  const t = { create: [] as number[], start: [] as number[], exec: [] as number[], remove: [] as number[] };
  const image = defaultImage();
  for (let i = 0; i < runs; i++) {
    const c = await time(t.create, () => docker.createContainer(buildCreateOptions({ image, limits, labels: { 'ratchet.bench': '1' } })));
    await time(t.start, () => c.start());
    const res = await time(t.exec, () => runExec({ docker, container: c, argv: ['true'], timeoutMs: 10_000, cwd: '/work', outputLimitBytes: 1024, log }));
    if (res.exitCode !== 0) throw new Error(`bench exec failed: ${JSON.stringify(res)}`);
    await time(t.remove, () => c.remove({ force: true }));
  }
  return t;
}

async function acquisition(docker: Docker, repo: RepoSpec | undefined) {
  const cold = new SandboxManager({ docker, log });
  const pooled = new SandboxManager({ docker, log });
  const poolLimits = { ...limits, warm_pool_size: 2 };
  const coldLimits = { ...limits, warm_pool_size: 0 };
  const labels = { run: 'bench', step: 0, rollout: 'r' };
  const t = { cold: [] as number[], pool: [] as number[] };
  try {
    await pooled.warm(poolLimits);
    for (let i = 0; i < runs; i++) {
      const a = await time(t.cold, () => cold.acquire({ labels, limits: coldLimits, repo }));
      await a.release();
      await pooled.warm(poolLimits); // measure a pool hit: refills finish between acquires
      const b = await time(t.pool, () => pooled.acquire({ labels, limits: poolLimits, repo }));
      if (pooled.lastSource !== 'pool') throw new Error('bench expected a pool hit');
      await b.release();
    }
  } finally {
    await pooled.close();
  }
  return t;
}

async function main(): Promise<void> {
  const docker = new Docker();
  const version = await docker.version();
  const repo = firstTask();
  const machine = `${os.cpus()[0]?.model ?? 'unknown CPU'}, ${os.cpus().length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB, kernel ${os.release()}, Docker ${version.Version}`;
  console.log(`machine: ${machine}; runs: ${runs}; image: ${defaultImage()}; load avg ${os.loadavg().map((x) => x.toFixed(1)).join(' ')}`);

  const lc = await lifecycle(docker);
  const empty = await acquisition(docker, undefined);
  let withRepo: { cold: number[]; pool: number[] } | undefined;
  let snapshotMs: number | undefined;
  if (repo) {
    clearSnapshotCache();
    const m = new SandboxManager({ docker, log });
    const t0 = performance.now();
    const sb = await m.acquire({ labels: { run: 'bench', step: 0, rollout: 'r' }, limits: { ...limits, warm_pool_size: 0 }, repo });
    snapshotMs = performance.now() - t0;
    await sb.release();
    withRepo = await acquisition(docker, repo);
  } else {
    console.warn(`no task set at ${paths.tasks()}: skipping acquisition with a repository (fix: bash infra/tasks.sh)`);
  }

  const results = {
    machine,
    runs,
    load_avg_end: os.loadavg(),
    lifecycle_ms: { create: fmt(lc.create), start: fmt(lc.start), exec: fmt(lc.exec), remove: fmt(lc.remove) },
    acquire_empty_ms: { cold: fmt(empty.cold), pool: fmt(empty.pool) },
    acquire_repo_ms: withRepo ? { repo: repo!.hostPath, cold: fmt(withRepo.cold), pool: fmt(withRepo.pool), first_cold_uncached: +snapshotMs!.toFixed(1) } : null,
  };
  console.log(JSON.stringify(results, null, 2));
  const ratio = (pool: number[], cold: number[]) => (pct(pool, 50) / pct(cold, 50)).toFixed(2);
  const row = (name: string, xs: number[]) => `| ${name} | ${fmt(xs).p50} | ${fmt(xs).p95} |`;
  console.log(['', '| operation | p50 ms | p95 ms |', '| --- | --- | --- |',
    row('create', lc.create), row('start', lc.start), row('exec `true`', lc.exec), row('remove', lc.remove),
    row('acquire, empty, cold', empty.cold), row('acquire, empty, from pool', empty.pool),
    ...(withRepo ? [row('acquire + repo, cold', withRepo.cold), row('acquire + repo, from pool', withRepo.pool)] : []),
    '', `pool/cold p50: empty ${ratio(empty.pool, empty.cold)}${withRepo ? `, with repo ${ratio(withRepo.pool, withRepo.cold)}` : ''}`].join('\n'));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
