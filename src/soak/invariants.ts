/**
 * What must hold after a run, however many faults it rode out: the checks the
 * fault tests and the soak share. Each returns the violations it found (an empty
 * list is a pass), so a test can assert on them and the soak can print them.
 */
import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { FallbackRecord, RunStatus, StepRecord } from '../contracts';
import { verifyDirectoryArtifact } from '../activities/weightSync';
import type { ArtifactRef } from '../artifacts/ref';
import { LocalArtifactStore, verifyRef, type ArtifactStore } from '../artifacts/store';
import { readRunRecords } from '../records/runRecords';
import { adapterName, adapterVersion } from '../shared/adapters';
import { workerSpecs } from '../stack';
import { readPid } from '../shared/pidFiles';

const run = promisify(execFile);

export interface RunExpectation {
  runId: string;
  artifactsRoot: string;
  maxSteps: number;
  rolloutsPerStep: number;
  inferenceUrl: string;
  /** The run's store when it is not the local one at artifactsRoot (an s3:// run: the soak's store-credentials incidents). */
  store?: ArtifactStore;
}

export interface RunCheck {
  violations: string[];
  records: StepRecord[];
  /** The run's checkpoint fallbacks, as read with its records (the soak holds them against fallbackViolations). */
  fallbacks: FallbackRecord[];
}

/** A file ref is read from its path, any other from the run's store (an s3:// get re-hashes what it receives). */
const verifyFile = (store: ArtifactStore) => async (ref: ArtifactRef): Promise<unknown> =>
  ref.uri.startsWith('file://') ? verifyRef(ref) : store.get(ref);
/** A directory artifact verified where it is, or (s3://) downloaded into the cache and verified there: its local path. */
const verifyDir = (store: ArtifactStore) => (ref: ArtifactRef): Promise<string> =>
  ref.uri.startsWith('file://') ? verifyDirectoryArtifact(ref) : store.localDir(ref);

const trained = (r: StepRecord): boolean => !(r.trainer as { skipped?: boolean }).skipped;

/**
 * The run invariants: every step recorded once, each with the full rollout count;
 * each trained step applied exactly once by the optimizer (ledger and counter);
 * every artifact matches its sha256; the final version was served.
 */
export async function checkRun(e: RunExpectation): Promise<RunCheck> {
  const violations: string[] = [];
  const store = e.store ?? new LocalArtifactStore(e.artifactsRoot);
  // The winning step record of each step (src/records/winners.ts): a step retrained after a checkpoint
  // fallback counts once, by its winner; the ledger check below then finds a step applied twice.
  const { steps: records, fallbacks } = await readRunRecords(store, e.runId);
  const steps = records.map((r) => r.step);
  const expected = Array.from({ length: e.maxSteps }, (_, i) => i);
  if (JSON.stringify(steps) !== JSON.stringify(expected)) violations.push(`step records ${JSON.stringify(steps)}, expected ${JSON.stringify(expected)}`);
  for (const r of records) {
    if (r.rollouts !== e.rolloutsPerStep) violations.push(`step ${r.step}: ${r.rollouts} rollouts, expected ${e.rolloutsPerStep}`);
  }
  const trainedSteps = records.filter(trained).map((r) => r.step);
  const last = records[records.length - 1];
  if (!last) return { violations: [...violations, 'no step record'], records, fallbacks };
  if (last.policy_version !== trainedSteps.length) {
    violations.push(`final policy version ${last.policy_version}, but ${trainedSteps.length} steps were trained`);
  }

  for (const r of records.filter(trained)) {
    const b = r.batch as { batch: ArtifactRef; manifest: ArtifactRef };
    const refs: [string, ArtifactRef, (ref: ArtifactRef) => Promise<unknown>][] = [
      ['batch', b.batch, verifyFile(store)], ['manifest', b.manifest, verifyFile(store)],
      ['checkpoint', r.checkpoint as ArtifactRef, verifyDir(store)], ['adapter', r.adapter as ArtifactRef, verifyDir(store)],
    ];
    for (const [what, ref, verify] of refs) {
      try {
        await verify(ref);
      } catch (err) {
        violations.push(`step ${r.step} ${what}: ${(err as Error).message}`);
      }
    }
  }

  const lastTrained = records.filter(trained).pop();
  if (lastTrained) {
    const ckptDir = await verifyDir(store)(lastTrained.checkpoint as ArtifactRef);
    const ledger = JSON.parse(await fs.readFile(path.join(ckptDir, 'ledger.json'), 'utf8')) as Record<string, { updates?: number }>;
    const ledgerSteps = Object.keys(ledger).map(Number).sort((a, b) => a - b);
    if (JSON.stringify(ledgerSteps) !== JSON.stringify(trainedSteps)) {
      violations.push(`trainer ledger has steps ${JSON.stringify(ledgerSteps)}, the records trained ${JSON.stringify(trainedSteps)}`);
    }
    // The optimizer's own count, carried through every checkpoint: a step applied twice shows here.
    // A step makes `updates` optimizer updates (trainer.minibatches x trainer.epochs; 1 by default).
    const state = JSON.parse(await fs.readFile(path.join(ckptDir, 'trainer_state.json'), 'utf8')) as { optimizer_steps: number };
    const updates = Object.values(ledger).reduce((n, m) => n + (m.updates ?? 1), 0);
    if (state.optimizer_steps !== updates) {
      violations.push(`optimizer took ${state.optimizer_steps} steps for ${trainedSteps.length} trained steps (${updates} updates)`);
    }
    // Served, from the run's own record (the run unloads its adapters when it ends, so vLLM cannot be asked now).
    // (Each replica by name only where the caller knows the run's base_urls exactly: e.inferenceUrl may be spelled otherwise.)
    violations.push(...finalVersionServed(records, e.runId));
    violations.push(...(await servedViolations(e, last.policy_version)));
  }
  return { violations, records, fallbacks };
}

/**
 * "No fallback committed by a transient error": a soak corrupts no checkpoint (its faults are crashes, hangs,
 * partitions and incidents an operator fixes), so every checkpoint fallback on record was committed on an
 * error that was not corruption (issue 39: only a sha256 mismatch or a file that does not parse is).
 */
export function fallbackViolations(fallbacks: FallbackRecord[]): string[] {
  return fallbacks.map((fb) => `a checkpoint fallback (epoch ${fb.epoch}, by ${fb.by}) was committed though no checkpoint was corrupted: ` +
    `step ${fb.bad.step} did not verify with "${fb.bad.error.slice(0, 200)}", ${fb.used ? `the run went back to step ${fb.used.step}` : 'the run went back to the base model'}`);
}

/** The status a run must show while an incident lasts (issue 39): riding it out without a word hides it from its operator. */
export const INCIDENT_WAIT_STATUS: Partial<Record<string, RunStatus>> = { 'store-credentials': 'waiting-for-store' };

/** Injected incidents during which the run never showed its wait status (`statuses`: what the progress query said from injection to recovery). */
export function waitShownViolations(faults: { index: number; kind: string; step: number; statuses?: RunStatus[]; error?: string }[]): string[] {
  return faults.flatMap((f) => {
    const want = INCIDENT_WAIT_STATUS[f.kind];
    if (!want || f.error || !f.statuses || f.statuses.includes(want)) return [];
    return [`fault ${f.index} (${f.kind} at step ${f.step}): the run never showed ${want} while it lasted (it showed ${JSON.stringify(f.statuses)})`];
  });
}

/** What a step record keeps of its weight sync (src/activities/weightSync.ts SyncWeightsResult). */
interface RecordedSync { policyVersion?: number; loaded?: string[]; alreadyLoaded?: string[] }

/**
 * "vLLM served the final version", checked on the run's records, so it can fail on a completed
 * run: once a run ends it unloads its adapters, and a look at vLLM then finds none, right or wrong.
 * The step that made the final version must have a weight sync on record that names the final
 * adapter as loaded (or already loaded) on each of `baseUrls` (each replica answered serving it);
 * with no `baseUrls`, on at least one replica.
 */
export function finalVersionServed(records: StepRecord[], runId: string, baseUrls: string[] = []): string[] {
  const lastTrained = records.filter(trained).pop();
  if (!lastTrained) return []; // version 0, the base model: nothing of the run's to serve
  const final = lastTrained.policy_version;
  const sync = lastTrained.weight_sync as RecordedSync | undefined;
  const where = `step ${lastTrained.step} (version ${final})`;
  if (!sync) return [`${where} has no weight sync on record: the final version was never served`];
  if (sync.policyVersion !== final) return [`${where}: its weight sync served version ${sync.policyVersion}, the trainer is at ${final}`];
  if (!sync.loaded && !sync.alreadyLoaded) return [`${where}: its weight sync record does not say which replicas serve ${adapterName(runId, final)}`];
  const want = adapterName(runId, final);
  const serving = [...(sync.loaded ?? []), ...(sync.alreadyLoaded ?? [])]
    .filter((entry) => entry.slice(entry.lastIndexOf('#') + 1) === want)
    .map((entry) => entry.slice(0, entry.lastIndexOf('#')));
  if (serving.length === 0) return [`${where}: no replica answered serving ${want} (loaded ${JSON.stringify(sync.loaded ?? [])}, already loaded ${JSON.stringify(sync.alreadyLoaded ?? [])})`];
  const missing = baseUrls.map((u) => u.replace(/\/+$/, '')).filter((u) => !serving.includes(u));
  return missing.length ? [`${where}: ${want} was not served by ${JSON.stringify(missing)} (served by ${JSON.stringify(serving)})`] : [];
}

/** vLLM serves the final version, or none of the run's adapters once the run has released them; never an older one alone. */
async function servedViolations(e: RunExpectation, finalVersion: number): Promise<string[]> {
  let ids: string[];
  try {
    const body = (await (await fetch(`${e.inferenceUrl}/models`)).json()) as { data: { id: string }[] };
    ids = body.data.map((m) => m.id);
  } catch (err) {
    return [`vLLM at ${e.inferenceUrl} did not answer /models: ${(err as Error).message}`];
  }
  const mine = ids.filter((id) => adapterVersion(e.runId, id) !== undefined);
  if (mine.length > 0 && !mine.includes(adapterName(e.runId, finalVersion))) {
    return [`vLLM serves ${JSON.stringify(mine)} of run ${e.runId} but not its final version ${finalVersion}`];
  }
  return [];
}

/** Sandboxes of the run still present (by name: ratchet-<run>-s<step>-...). */
export async function leftoverSandboxes(runId: string): Promise<string[]> {
  const { stdout } = await run('docker', ['ps', '-a', '--format', '{{.Names}}', '--filter', `name=ratchet-${runId}-s`]);
  return stdout.split('\n').filter(Boolean);
}

/**
 * Worker processes beyond the supervised ones: a restart that left the old process
 * running (or a second copy started by a race) shows up here.
 */
export async function strayWorkers(): Promise<string[]> {
  const supervised = new Set(workerSpecs().map((s) => readPid(s.name)).filter((p): p is number => p !== undefined));
  const { stdout } = await run('ps', ['-eo', 'pid=,args=']);
  return stdout.split('\n')
    .map((l) => l.trim())
    .filter((l) => /dist\/workers\/(main|rollout)\.js|ratchet_trainer\.worker/.test(l))
    .filter((l) => !supervised.has(Number(l.split(/\s+/)[0])))
    .map((l) => `stray worker process: ${l.slice(0, 160)}`);
}
