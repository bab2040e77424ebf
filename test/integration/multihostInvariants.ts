/**
 * The fault tests' run invariants (trainrunStack.ts checkInvariants), read through the
 * run's artifact store instead of a local directory: on the multi-host topology no
 * host's disk holds the run, only the S3 store does.
 */
import { readStepRecords } from '../../src/records/runRecords';
import * as path from 'node:path';
import { StepRecord } from '../../src/contracts';
import type { ArtifactRef } from '../../src/artifacts/ref';
import { adapterName } from '../../src/shared/adapters';
import { finalVersionServed } from '../../src/soak/invariants';

/** The part of the store API (src/artifacts/stores.ts) the checks use. */
interface RunStore {
  read(key: string): Promise<Buffer | undefined>;
  get(ref: ArtifactRef): Promise<Buffer>;
  /** A directory artifact, every file verified against its manifest, in a local cache. */
  localDir(ref: ArtifactRef): Promise<string>;
}
interface StoresModule {
  storeFor(settings: { url: string; endpoint?: string; force_path_style?: boolean }, fallback: unknown): RunStore;
  defaultStore(): unknown;
}

// Loaded by name: the S3 store arrives with the store work (issue 12), and this helper
// must not break the type check of a tree without it; the test skips without it.
const STORES_MODULE = '../../src/artifacts/stores';

export async function checkInvariantsInStore(p: {
  runId: string; maxSteps: number; rolloutsPerStep: number; inferenceUrl: string; s3: { url: string; endpoint: string };
}): Promise<(StepRecord & { trainer: { restarts: number } })[]> {
  const stores = (await import(STORES_MODULE)) as StoresModule;
  const store = stores.storeFor({ url: p.s3.url, endpoint: p.s3.endpoint, force_path_style: true }, stores.defaultStore());
  // The winning step records (appended under runs/<run>/records/; metrics.jsonl for runs from before 0.6).
  const records = (await readStepRecords(store as never, p.runId)) as (StepRecord & { trainer: { restarts: number } })[];
  if (records.length === 0) throw new Error(`runs/${p.runId} has no step record in ${p.s3.url}`);
  expect(records.map((r) => r.step)).toEqual(Array.from({ length: p.maxSteps }, (_, i) => i));
  for (const r of records) expect(r.rollouts).toBe(p.rolloutsPerStep);
  const last = records[records.length - 1]!;
  expect(last.policy_version).toBe(p.maxSteps);
  for (const r of records) {
    const b = r.batch as { batch: ArtifactRef; manifest: ArtifactRef };
    expect(b.batch.uri).toMatch(/^s3:\/\//); // nothing of the run went to a host's disk
    await store.get(b.batch);
    await store.get(b.manifest);
    await store.localDir(r.checkpoint as ArtifactRef);
    await store.localDir(r.adapter as ArtifactRef);
  }
  const ckptDir = await store.localDir(last.checkpoint as ArtifactRef);
  const { promises: fs } = await import('node:fs');
  const ledger = JSON.parse(await fs.readFile(path.join(ckptDir, 'ledger.json'), 'utf8')) as Record<string, unknown>;
  expect(Object.keys(ledger).map(Number).sort((a, b) => a - b)).toEqual(records.map((r) => r.step));
  const state = JSON.parse(await fs.readFile(path.join(ckptDir, 'trainer_state.json'), 'utf8')) as { optimizer_steps: number };
  expect(state.optimizer_steps).toBe(p.maxSteps);
  // The last weight sync served the final version; once the run ended it released its adapters,
  // so vLLM serves none of them now, or the final one, never an older one alone.
  // From the run's record of what each replica answered (the adapters are unloaded by now).
  expect(finalVersionServed(records, p.runId)).toEqual([]);
  const models = (await (await fetch(`${p.inferenceUrl}/models`)).json()) as { data: { id: string }[] };
  const mine = models.data.map((m) => m.id).filter((id) => id.startsWith(`${p.runId}/`));
  if (mine.length > 0) expect(mine).toContain(adapterName(p.runId, last.policy_version));
  return records;
}
