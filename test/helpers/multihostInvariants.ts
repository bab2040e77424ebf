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
  list(prefix: string): Promise<string[]>;
  exists(key: string): Promise<ArtifactRef | undefined>;
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

/** What the store holds beside what the records name: the objects stale or retried attempts left. */
export type { RunStore };
export interface StoreAudit {
  trajectoryObjects: number;
  /** Trajectory objects no step's summaries name: other attempts of a rollout (content-keyed, so beside the winner). */
  unreferencedTrajectories: number;
  checkpointDirs: number;
  /** Checkpoints saved by a save that lost the race for its key (`.attempt-<id>`). */
  attemptCheckpointDirs: number;
}

const sha256 = async (b: Buffer): Promise<string> => (await import('node:crypto')).createHash('sha256').update(b).digest('hex');

/**
 * No stale attempt overwrote what a newer one wrote, checked object by object in the store:
 * - every trajectory object's bytes hash to the sha256 its key names (content keys: an object
 *   replaced by another attempt's bytes under the same key would fail), and every trajectory a
 *   step's summaries name is there with the bytes the summary recorded;
 * - every checkpoint directory, the record's and any other attempt's, has all its files as its
 *   manifest lists them (a stale save that replaced one file of the winner's would fail), and
 *   each record names a checkpoint of its own step that verifies;
 * - state.json was not rolled back: it names the last step and its checkpoint.
 */
export async function auditStoreAgainstRecords(p: { runId: string; records: StepRecord[]; s3?: { url: string; endpoint: string }; store?: RunStore }): Promise<StoreAudit> {
  const stores = (await import(STORES_MODULE)) as StoresModule;
  const store = p.store ?? stores.storeFor({ url: p.s3!.url, endpoint: p.s3!.endpoint, force_path_style: true }, stores.defaultStore());
  const run = `runs/${p.runId}`;
  const audit: StoreAudit = { trajectoryObjects: 0, unreferencedTrajectories: 0, checkpointDirs: 0, attemptCheckpointDirs: 0 };
  const referenced = new Set<string>();
  for (const r of p.records) {
    type Summary = { trajectory: ArtifactRef };
    const dir = `${run}/steps/${r.step}/rollouts`;
    const whole = await store.read(`${dir}/summaries.json`);
    let summaries: Summary[];
    if (whole) summaries = JSON.parse(whole.toString('utf8')) as Summary[];
    else {
      // Only parts (a step stored in parts and never joined): the step's summaries are all of them.
      const parts = (await store.list(dir)).filter((k) => /\/summaries-part-\d+\.json$/.test(k));
      if (parts.length === 0) throw new Error(`step ${r.step}: no rollout summaries in the store`);
      summaries = (await Promise.all(parts.map(async (k) => JSON.parse((await store.read(k))!.toString('utf8')) as Summary[]))).flat();
    }
    expect(summaries.length).toBe(r.rollouts);
    for (const s of summaries) {
      await store.get(s.trajectory); // the bytes the record's summary names, under its key
      referenced.add(s.trajectory.uri.slice(s.trajectory.uri.indexOf(`${run}/`)));
    }
  }
  const stepObjects = await store.list(`${run}/steps`);
  for (const key of stepObjects.filter((k) => /\/rollouts\/[^/]+\/[^/]+\.json$/.test(k) && !/\/summaries(-part-\d+)?\.json$/.test(k))) {
    audit.trajectoryObjects++;
    const m = /\/(\d+)-([0-9a-f]{16})\.json$/.exec(key);
    if (!m) throw new Error(`${key}: a trajectory not keyed by its content`);
    const body = await store.read(key);
    expect((await sha256(body!)).slice(0, 16)).toBe(m[2]);
    if (!referenced.has(key)) audit.unreferencedTrajectories++;
  }
  expect(audit.trajectoryObjects - audit.unreferencedTrajectories).toBe(referenced.size);

  const ckptObjects = await store.list(`${run}/checkpoints`);
  const manifests = ckptObjects.filter((k) => /\/checkpoints\/[^/]+\/MANIFEST\.sha256$/.test(k));
  const dirs = [...new Set(ckptObjects.map((k) => k.replace(/^(.*\/checkpoints\/[^/]+)\/.*$/, '$1')))];
  for (const dir of dirs) {
    audit.checkpointDirs++;
    if (/\.attempt-[^/]+$/.test(dir)) audit.attemptCheckpointDirs++;
    const man = manifests.find((k) => k.startsWith(`${dir}/`));
    if (!man) continue; // a save cut off before its manifest: no reader trusts it
    const manRef = (await store.exists(man))!;
    // The directory as its manifest lists it: every file there with the manifest's sha256.
    await store.localDir({ uri: manRef.uri.slice(0, -'/MANIFEST.sha256'.length), sha256: await sha256((await store.read(man))!), bytes: 0 });
  }
  for (const r of p.records) {
    const ck = r.checkpoint as ArtifactRef | undefined;
    const n = Number(/\/checkpoints\/step-(\d+)(-[0-9a-f]{16})?(\.attempt-[^/]+)?$/.exec(ck?.uri ?? '')?.[1]);
    expect([r.step, r.policy_version]).toContain(n); // the record names a checkpoint of its own step
  }
  const state = JSON.parse((await store.read(`${run}/state.json`))!.toString('utf8')) as { completedStep: number; checkpoint?: ArtifactRef };
  const last = p.records[p.records.length - 1]!;
  expect(state.completedStep).toBe(last.step);
  expect(state.checkpoint?.sha256).toBe((last.checkpoint as ArtifactRef).sha256);
  return audit;
}
