/**
 * Bytes a run keeps per step, with and without [artifacts.retention] (issue 42). A store-level bench: a
 * 50-step run's artifacts written into a local store with the sizes of a real run (defaults: the smoke
 * run's, measured on the local stack: SmolLM2-135M, LoRA r=8, 10 rollouts a step), each step recorded
 * through the real recordStep activity, which applies the run's retention as it does in a run. No model,
 * trainer or sandbox runs: the bytes are random, the keys and the deletions are the run's own.
 * With an S3 store each host also keeps local copies: the trainer its staging copy of each checkpoint,
 * deleted once uploaded (trainer core/checkpoint.py, so none stays), and the inference host an adapter a
 * step in its S3 download cache, bounded by the real pruneCache and recordServed (src/artifacts/cache.ts)
 * on a simulated clock of --step-s seconds a step, async_level + 1 versions served at a time.
 *   npm run bench:retention [-- --steps 50 --keep-last 3 --keep-every 10 --adapter-mb 9.4 --optimizer-mb 19 \
 *     --rollouts 10 --trajectory-kb 22 --journal-kb 17 --batch-kb 110 --cache-mib 64 --step-s 60 --async-level 1]
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, utimesSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import pino from 'pino';
import { runKeys } from '../artifacts/keys';
import { pruneCache, recordServed } from '../artifacts/cache';
import { LocalArtifactStore, MANIFEST } from '../artifacts/store';
import { createMetricsActivities } from '../activities/metrics';
import { RunConfig } from '../config/schema';
import type { RunStateFile, StepRecord } from '../contracts';
import { machineLine, writeBenchSection } from './benchmarksFile';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};

const o = {
  steps: arg('steps', 50), keepLast: arg('keep-last', 3), keepEvery: arg('keep-every', 10),
  adapterMb: arg('adapter-mb', 9.4), optimizerMb: arg('optimizer-mb', 19), rollouts: arg('rollouts', 10),
  trajectoryKb: arg('trajectory-kb', 22), journalKb: arg('journal-kb', 17), batchKb: arg('batch-kb', 110),
  cacheMib: arg('cache-mib', 64), stepS: arg('step-s', 60), asyncLevel: arg('async-level', 1),
};
const MB = 2 ** 20;

function bytesUnder(dir: string): number {
  let n = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    n += e.isDirectory() ? bytesUnder(p) : statSync(p).size;
  }
  return n;
}

/** A checkpoint as the trainer writes it: adapter/ (its own manifest comes from putDir), optimizer state, RNG, ledger, trainer state. */
function checkpointSource(): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-ret-ckpt-'));
  mkdirSync(path.join(dir, 'adapter'));
  writeFileSync(path.join(dir, 'adapter', 'adapter_model.safetensors'), randomBytes(Math.round(o.adapterMb * MB)));
  writeFileSync(path.join(dir, 'adapter', 'adapter_config.json'), randomBytes(1200));
  writeFileSync(path.join(dir, 'optimizer.pt'), randomBytes(Math.round(o.optimizerMb * MB)));
  writeFileSync(path.join(dir, 'rng.pt'), randomBytes(6541));
  for (const f of ['ledger.json', 'trainer_state.json']) writeFileSync(path.join(dir, f), randomBytes(1400));
  return dir;
}

/** Bytes in the store after each step (index = step). */
async function run(retention: boolean, src: string): Promise<number[]> {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-ret-'));
  const store = new LocalArtifactStore(root);
  const runId = 'bench';
  await store.putJson(runKeys.config(runId), RunConfig.parse({
    name: 'bench', env: [{ id: 'swe-grep' }], ...(retention ? { artifacts: { retention: { keep_last: o.keepLast, keep_every: o.keepEvery } } } : {}),
  }));
  const { recordStep } = createMetricsActivities({ store, logger: pino({ level: 'silent' }) });
  const sizes: number[] = [];
  for (let s = 0; s < o.steps; s++) {
    for (let i = 0; i < o.rollouts; i++) {
      const g = `g${Math.floor(i / 2)}`;
      await store.put(runKeys.trajectory(runId, s, g, i % 2, randomBytes(32).toString('hex')), randomBytes(o.trajectoryKb * 1024));
      // A journal part a turn; two turns a rollout.
      for (const t of [0, 1]) await store.put(runKeys.rolloutJournalTurn(runId, s, g, i % 2, t, 'a1'), randomBytes(o.journalKb * 512));
    }
    await store.put(runKeys.rolloutSummaries(runId, s), randomBytes(4096));
    await store.put(`${runKeys.step(runId, s)}/batch.safetensors`, randomBytes(o.batchKb * 1024));
    const key = `${runKeys.run(runId)}/checkpoints/step-${s}-${randomBytes(8).toString('hex')}`;
    const checkpoint = await store.putDir(key, src);
    const adapter = await store.putDir(`${key}/adapter`, store.localPath(`${key}/adapter`));
    const record: StepRecord = {
      format: 'ratchet.step/v1', run_id: runId, step: s, time: new Date(Date.UTC(2026, 0, 1, 0, 0, s)).toISOString(), policy_version: s + 1,
      mean_reward: 0, reward_std: 0, reward_components: {}, rollouts: o.rollouts, samples: o.rollouts, dropped: {}, stop_reasons: {},
      mean_staleness: 0, completion_tokens: 0, tool_calls: 0, trainer: { loss: 1 }, timing_ms: {}, checkpoint, adapter,
    };
    const state: RunStateFile = {
      format: 'ratchet.run-state/v1', runId, configSha256: 'x', completedStep: s, nextStep: s + 1, policyVersion: s + 1,
      configRef: { uri: 'file:///x', sha256: '0'.repeat(64), bytes: 1 }, seed: 0, checkpoint, adapter, lastMeanReward: 0,
    };
    await recordStep({ record, state });
    sizes.push(bytesUnder(root));
  }
  rmSync(root, { recursive: true, force: true });
  return sizes;
}

/** Bytes in an inference host's S3 download cache after each step: an adapter downloaded a step (as localDir writes it), then bounded. */
async function inferenceCache(bounded: boolean): Promise<number[]> {
  const root = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-cache-'));
  const t0 = Date.UTC(2026, 0, 1);
  const dirs: string[] = [];
  const sizes: number[] = [];
  for (let s = 0; s < o.steps; s++) {
    const dir = path.join(root, 'bkt', 'runs', 'bench', 'checkpoints', `step-${s}-${randomBytes(8).toString('hex')}`, 'adapter', randomBytes(8).toString('hex'));
    mkdirSync(dir, { recursive: true });
    writeFileSync(path.join(dir, 'adapter_model.safetensors'), randomBytes(Math.round(o.adapterMb * MB)));
    writeFileSync(path.join(dir, MANIFEST), randomBytes(200));
    const now = new Date(t0 + s * o.stepS * 1000);
    utimesSync(dir, now, now);
    dirs.push(dir);
    if (bounded) {
      // Served after this step's sync: the newest async_level + 1 versions (weight sync unloads older ones).
      await recordServed(root, 'http://127.0.0.1:8000/v1', dirs.slice(-(o.asyncLevel + 1)));
      await pruneCache(root, o.cacheMib * MB, { keep: [dir], nowMs: now.getTime() });
    }
    sizes.push(bytesUnder(root));
  }
  rmSync(root, { recursive: true, force: true });
  return sizes;
}

async function main(): Promise<void> {
  const src = checkpointSource();
  const keep = await run(false, src);
  const pruned = await run(true, src);
  rmSync(src, { recursive: true, force: true });
  const cacheBefore = await inferenceCache(false);
  const cacheNow = await inferenceCache(true);
  const last = o.steps - 1;
  const tail = Math.min(10, o.steps - 1);
  const perStep = (xs: number[]) => (xs[last]! - xs[last - tail]!) / tail;
  const f = (b: number) => `${(b / MB).toFixed(1)} MiB`;
  const lines = [
    '### Storage per step, with and without `[artifacts.retention]` (issue 42)',
    '',
    `\`npm run bench:retention\`: ${machineLine()}. A store-level bench: ${o.steps} steps of a run's artifacts written to a local store with the`,
    `sizes of the smoke run measured on the local stack (SmolLM2-135M, LoRA r=8: adapter ${o.adapterMb} MiB, optimizer state ${o.optimizerMb} MiB;`,
    `${o.rollouts} rollouts a step, trajectories ${o.trajectoryKb} KiB, turn journals ${o.journalKb} KiB a rollout, batch ${o.batchKb} KiB), random bytes,`,
    'each step recorded through the real `recordStep` activity, which applies the run\'s retention. No model or sandbox runs.',
    '',
    '| | stored after the last step | growth per step at steady state (last 10 steps) |',
    '| --- | --- | --- |',
    `| no retention (before 0.8) | ${f(keep[last]!)} | ${f(perStep(keep))} |`,
    `| \`keep_last = ${o.keepLast}\`, \`keep_every = ${o.keepEvery}\` | ${f(pruned[last]!)} | ${f(perStep(pruned))} |`,
    '',
    `With retention the checkpoints stay at ${o.keepLast} whole plus an adapter every ${o.keepEvery} versions; what still grows is what lineage,`,
    'replay-step and reports read (trajectories, batches, records) and one adapter per keep_every steps.',
    '',
    `With an S3 store, each host's local copies (not in the store; before 0.8 none was ever deleted). The trainer's staging copy of a checkpoint`,
    `(${(o.adapterMb + o.optimizerMb).toFixed(1)} MiB here) is deleted once uploaded (trainer/tests/test_staging_cache.py): before, one a step, ${f((o.adapterMb + o.optimizerMb) * MB * o.steps)} after ${o.steps} steps (computed, not run). The inference host's`,
    `download cache gets an adapter a step; bounded by the real \`pruneCache\` at \`RATCHET_CACHE_MAX_GIB\` = ${o.cacheMib} MiB (the default is 20 GiB) on a`,
    `simulated clock of ${o.stepS} s a step, ${o.asyncLevel + 1} versions served at a time (never evicted, nor copies used in the last 10 minutes):`,
    '',
    '| inference host\'s S3 download cache | after the last step | growth per step at steady state (last 10 steps) |',
    '| --- | --- | --- |',
    `| unbounded (before 0.8) | ${f(cacheBefore[last]!)} | ${f(perStep(cacheBefore))} |`,
    `| bounded at ${o.cacheMib} MiB | ${f(cacheNow[last]!)} | ${f(perStep(cacheNow))} |`,
    '',
    `What stays bounded is the cache's steady state: the adapters downloaded in the last 10 minutes (${Math.ceil(600 / o.stepS)} at ${o.stepS} s a step) are in use and`,
    'may hold it above a bound smaller than they are.',
  ];
  writeBenchSection('retention', lines);
  console.log(lines.join('\n'));
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
