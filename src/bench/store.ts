/**
 * S3 store (MinIO, infra/minio.sh) against the file store, in the same run: put
 * and get throughput for a step's batch (one object) and for a checkpoint (a
 * directory artifact: files + MANIFEST, fetched into a fresh local cache).
 *   bash infra/minio.sh start && npm run bench:store [-- --batch-mb 4 --checkpoint-mb 16 --repeat 5]
 * Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (default: infra/minio.sh's).
 */
import { randomBytes } from 'node:crypto';
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { S3ArtifactStore } from '../artifacts/s3';
import { LocalArtifactStore, type ArtifactStore } from '../artifacts/store';
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

async function main(): Promise<void> {
  const batchMb = arg('batch-mb', 4);
  const ckptMb = arg('checkpoint-mb', 16);
  const repeat = arg('repeat', 5);
  const endpoint = process.env.RATCHET_S3_ENDPOINT ?? `http://127.0.0.1:${process.env.RATCHET_MINIO_PORT ?? 9100}`;
  const bucket = process.env.RATCHET_S3_BUCKET ?? 'ratchet';
  process.env.AWS_ACCESS_KEY_ID ??= process.env.MINIO_ROOT_USER ?? 'ratchet';
  process.env.AWS_SECRET_ACCESS_KEY ??= process.env.MINIO_ROOT_PASSWORD ?? 'ratchet-secret';
  const batch = randomBytes(Math.round(batchMb * 1024 * 1024));
  const ckpt = checkpointDir(ckptMb);
  const fileRoot = mkdtempSync(path.join(tmpdir(), 'ratchet-bench-store-'));
  const file = await measure('file://', () => new LocalArtifactStore(fileRoot), batch, ckpt, repeat);
  const s3 = await measure(`s3:// (MinIO at ${endpoint})`, (cache) => new S3ArtifactStore({ url: `s3://${bucket}/bench`, endpoint }, cache), batch, ckpt, repeat);
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
    `Command: \`bash infra/minio.sh start && npm run bench:store -- --batch-mb ${batchMb} --checkpoint-mb ${ckptMb} --repeat ${repeat}\` (source \`src/bench/store.ts\`).`,
    `Machine: ${machineLine()}; MinIO on the same machine (loopback), single drive.`,
    '',
    '| store | batch put | batch get | checkpoint put | checkpoint get |',
    '| --- | ---: | ---: | ---: | ---: |',
    row(file),
    row(s3),
    '',
    `S3 / file time: batch put ${ratio(s3.batchPut, file.batchPut)}x, batch get ${ratio(s3.batchGet, file.batchGet)}x, ` +
      `checkpoint put ${ratio(s3.ckptPut, file.ckptPut)}x, checkpoint get ${ratio(s3.ckptGet, file.ckptGet)}x.`,
  ]);
  console.log(section);
}

main().catch((err: unknown) => {
  console.error(err);
  process.exit(1);
});
