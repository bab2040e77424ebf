/**
 * S3 store (MinIO, infra/minio.sh) against the file store, in the same run: put
 * and get throughput for a step's batch (one object) and for a checkpoint (a
 * directory artifact: files + MANIFEST, fetched into a fresh local cache).
 * With --weight-sync (needs `ratchet up`: vLLM serving SmolLM2, and a real adapter from an
 * earlier run, or --adapter <dir>): weight-sync latency through each store, from the
 * trainer's save (the adapter put into the store) to vLLM serving it (the inference side
 * pulls it into a cold cache, verifies it and calls load_lora_adapter).
 *   bash infra/minio.sh start && npm run bench:store [-- --batch-mb 4 --checkpoint-mb 16 --repeat 5 --weight-sync]
 * Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (default: infra/minio.sh's).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { RUNS_PREFIX, runKeys } from '../artifacts/keys';
import { S3ArtifactStore } from '../artifacts/s3';
import { LocalArtifactStore, type ArtifactStore } from '../artifacts/store';
import type { StoreSettings } from '../artifacts/settings';
import { createWeightSyncActivities } from '../activities/weightSync';
import { DEFAULTS, paths } from '../shared/paths';
import { componentLogger } from '../shared/logger';
import { minioSettings } from '../stack/minio';
import { machineLine, writeBenchSection } from './benchmarksFile';

const arg = (name: string, fallback: number): number => {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? Number(process.argv[i + 1]) : fallback;
};

interface Row { backend: string; batchPut: number; batchGet: number; ckptPut: number; ckptGet: number }

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function timeMs(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** A checkpoint-shaped directory: adapter weights, optimizer state and small JSON files, incompressible bytes. */
function checkpointDir(totalMb: number): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-ckpt-'));
  mkdirSync(path.join(dir, 'adapter'));
  const mb = 1024 * 1024;
  writeFileSync(path.join(dir, 'adapter', 'adapter_model.safetensors'), randomBytes(Math.round(totalMb * mb / 3)));
  writeFileSync(path.join(dir, 'adapter', 'adapter_config.json'), JSON.stringify({ r: 8, lora_alpha: 16 }));
  writeFileSync(path.join(dir, 'optimizer.pt'), randomBytes(Math.round(totalMb * mb * 2 / 3)));
  for (const f of ['rng.pt', 'ledger.json', 'trainer_state.json']) writeFileSync(path.join(dir, f), randomBytes(4096));
  return dir;
}

async function measure(backend: string, make: (cache: string) => ArtifactStore, batch: Buffer, ckpt: string, repeat: number): Promise<Row> {
  const t = { batchPut: [] as number[], batchGet: [] as number[], ckptPut: [] as number[], ckptGet: [] as number[] };
  for (let i = 0; i < repeat; i++) {
    const cache = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-cache-'));
    const store = make(cache);
    const key = `bench/${process.pid}-${i}`;
    let ref = await store.put(`${key}/warm`, 'x');
    t.batchPut.push(await timeMs(async () => { ref = await store.put(`${key}/steps/0/batch.safetensors`, batch); }));
    t.batchGet.push(await timeMs(() => store.get(ref)));
    let dirRef = ref;
    t.ckptPut.push(await timeMs(async () => { dirRef = await store.putDir(`${key}/checkpoints/step-0`, ckpt); }));
    // A fresh cache each time: the other host's first read of the checkpoint (the local store verifies in place).
    t.ckptGet.push(await timeMs(() => store.localDir(dirRef)));
    rmSync(cache, { recursive: true, force: true });
  }
  return { backend, batchPut: median(t.batchPut), batchGet: median(t.batchGet), ckptPut: median(t.ckptPut), ckptGet: median(t.ckptGet) };
}

interface SyncRow { backend: string; putMs: number; serveMs: number; totalMs: number }

/** The newest real adapter an earlier run saved under the local artifacts (vLLM only loads real ones). */
function newestAdapter(): string | undefined {
  const runs = path.join(paths.artifacts(), RUNS_PREFIX);
  if (!existsSync(runs)) return undefined;
  let best: { dir: string; t: number } | undefined;
  for (const run of readdirSync(runs)) {
    const ckpts = path.join(paths.artifacts(), runKeys.checkpoints(run));
    if (!existsSync(ckpts)) continue;
    for (const c of readdirSync(ckpts)) {
      const dir = path.join(ckpts, c, 'adapter');
      if (!existsSync(path.join(dir, 'adapter_model.safetensors'))) continue;
      const t = statSync(dir).mtimeMs;
      if (!best || t > best.t) best = { dir, t };
    }
  }
  return best?.dir;
}

/** Saved → served: the adapter put into `store`, then the sync activity's pull (cold cache) + vLLM load. */
async function measureSync(backend: string, store: ArtifactStore, settings: StoreSettings | undefined, adapterDir: string, inference: string, repeat: number): Promise<SyncRow> {
  const logger = componentLogger('bench-store');
  const t = { put: [] as number[], serve: [] as number[], total: [] as number[] };
  for (let i = 0; i < repeat; i++) {
    const runId = `bench-ws-${backend.startsWith('s3') ? 's3' : 'file'}-${process.pid}-${i}`;
    const cache = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-sync-cache-'));
    // The inference host's default store: an empty local one, so an s3:// adapter must come through its own settings.
    const sync = createWeightSyncActivities({ logger, store: new LocalArtifactStore(cache) });
    try {
      const t0 = performance.now();
      const ref = await store.putDir(`${runKeys.checkpoint(runId, 0)}/adapter`, adapterDir);
      const t1 = performance.now();
      await sync.syncWeights({ runId, baseUrls: [inference], policyVersion: 1, adapter: ref, keepFromVersion: 0, artifacts: settings });
      const t2 = performance.now();
      t.put.push(t1 - t0);
      t.serve.push(t2 - t1);
      t.total.push(t2 - t0);
    } finally {
      await sync.unloadRunAdapters({ runId, baseUrls: [inference] });
      rmSync(cache, { recursive: true, force: true });
    }
  }
  return { backend, putMs: median(t.put), serveMs: median(t.serve), totalMs: median(t.total) };
}

async function weightSyncLines(fileRoot: string, s3Settings: StoreSettings, makeS3: () => ArtifactStore, repeat: number): Promise<string[]> {
  const inference = (() => { const i = process.argv.indexOf('--inference'); return i >= 0 ? process.argv[i + 1]! : DEFAULTS.inferenceUrl; })();
  const adapterArg = process.argv.indexOf('--adapter');
  const adapterDir = adapterArg >= 0 ? process.argv[adapterArg + 1]! : newestAdapter();
  if (!adapterDir) throw new Error(`--weight-sync needs a real adapter: none under ${paths.artifacts()}/runs/*/checkpoints/*/adapter. Fix: run \`bash infra/main.sh\` once, or pass --adapter <dir>`);
  try {
    await fetch(`${inference}/models`);
  } catch {
    throw new Error(`--weight-sync: vLLM at ${inference} does not answer. Fix: bin/ratchet up (or --inference <url>)`);
  }
  const file = await measureSync('file://', new LocalArtifactStore(fileRoot), undefined, adapterDir, inference, repeat);
  const s3 = await measureSync(`s3:// (MinIO)`, makeS3(), s3Settings, adapterDir, inference, repeat);
  const mb = readdirSync(adapterDir).reduce((a, f) => a + statSync(path.join(adapterDir, f)).size, 0) / 1024 / 1024;
  const row = (r: SyncRow) => `| ${r.backend} | ${r.putMs.toFixed(0)} | ${r.serveMs.toFixed(0)} | ${r.totalMs.toFixed(0)} |`;
  return [
    '',
    `**Weight sync, saved → served**: a real LoRA adapter (${mb.toFixed(1)} MB, from an earlier SmolLM2-135M run) put into each store`,
    `(what trainer.save does), then the sync activity (the inference side: pull into a cold cache and verify for s3://,`,
    `in place for file://; then vLLM's load_lora_adapter) until vLLM serves it. vLLM CPU at ${inference}; medians of ${repeat}.`,
    '',
    '| store | put (ms) | pull + load, until served (ms) | saved → served (ms) |',
    '| --- | ---: | ---: | ---: |',
    row(file),
    row(s3),
    '',
    `S3 / file saved → served: ${(s3.totalMs / file.totalMs).toFixed(2)}x. Across hosts (the five-host netns test, S3 through`,
    'MinIO on the control host) the same path took 0.2-0.4 s a step (see "Weight sync across hosts" above).',
  ];
}

async function main(): Promise<void> {
  const batchMb = arg('batch-mb', 4);
  const ckptMb = arg('checkpoint-mb', 16);
  const repeat = arg('repeat', 5);
  const minio = minioSettings();
  const endpoint = process.env.RATCHET_S3_ENDPOINT ?? minio.endpoint;
  const bucket = process.env.RATCHET_S3_BUCKET ?? minio.bucket;
  process.env.AWS_ACCESS_KEY_ID ??= minio.rootUser;
  process.env.AWS_SECRET_ACCESS_KEY ??= minio.rootPassword;
  const batch = randomBytes(Math.round(batchMb * 1024 * 1024));
  const ckpt = checkpointDir(ckptMb);
  const fileRoot = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-store-'));
  const file = await measure('file://', () => new LocalArtifactStore(fileRoot), batch, ckpt, repeat);
  const s3 = await measure(`s3:// (MinIO at ${endpoint})`, (cache) => new S3ArtifactStore({ url: `s3://${bucket}/bench`, endpoint }, cache), batch, ckpt, repeat);
  const s3Settings = { url: `s3://${bucket}/bench`, endpoint };
  const syncLines = process.argv.includes('--weight-sync')
    ? await weightSyncLines(fileRoot, s3Settings, () => new S3ArtifactStore(s3Settings, mkdtempSync(path.join(tmpdir(), 'ratchet-bench-cache-'))), repeat)
    : [];
  rmSync(fileRoot, { recursive: true, force: true });
  rmSync(ckpt, { recursive: true, force: true });

  const mbps = (mb: number, ms: number) => (mb / (ms / 1000)).toFixed(0);
  const row = (r: Row) => `| ${r.backend} | ${r.batchPut.toFixed(0)} ms (${mbps(batchMb, r.batchPut)} MB/s) | ${r.batchGet.toFixed(0)} ms (${mbps(batchMb, r.batchGet)} MB/s) | ` +
    `${r.ckptPut.toFixed(0)} ms (${mbps(ckptMb, r.ckptPut)} MB/s) | ${r.ckptGet.toFixed(0)} ms (${mbps(ckptMb, r.ckptGet)} MB/s) |`;
  const ratio = (a: number, b: number) => (a / b).toFixed(1);
  const section = writeBenchSection('store', [
    '### Artifact store: S3 (MinIO) against the file store',
    '',
    `A step's batch (${batchMb} MB, one object) and a checkpoint (${ckptMb} MB: adapter, optimizer state, small files, written as`,
    'a directory artifact with its MANIFEST last) put into and read back from each store, sha256 checked on every read.',
    'The checkpoint read goes into a fresh local cache each time (what another host does on first use); the file store',
    'verifies in place. Medians of the repeats; the file store is the baseline, measured in the same run.',
    '',
    `Command: \`bash infra/minio.sh start && npm run bench:store -- --batch-mb ${batchMb} --checkpoint-mb ${ckptMb} --repeat ${repeat}${syncLines.length ? ' --weight-sync' : ''}\` (source \`src/bench/store.ts\`).`,
    `Machine: ${machineLine()}; MinIO on the same machine (loopback), single drive.`,
    '',
    '| store | batch put | batch get | checkpoint put | checkpoint get |',
    '| --- | ---: | ---: | ---: | ---: |',
    row(file),
    row(s3),
    '',
    `S3 / file time: batch put ${ratio(s3.batchPut, file.batchPut)}x, batch get ${ratio(s3.batchGet, file.batchGet)}x, ` +
      `checkpoint put ${ratio(s3.ckptPut, file.ckptPut)}x, checkpoint get ${ratio(s3.ckptGet, file.ckptGet)}x.`,
    ...syncLines,
  ]);
  console.log(section);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
