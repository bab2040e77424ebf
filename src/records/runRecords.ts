/**
 * A run's records in its artifact store, appended and never rewritten (docs/contracts.md, "Artifact
 * layout"): one object per step record, run state, checkpoint fallback and fallback revert under runs/<run>/records/,
 * each content-keyed and created only where absent (ArtifactStore.putIfAbsent: a hard link locally,
 * If-None-Match on S3). A stale attempt can add an object but never replace or roll back one; readers
 * pick the winners (./winners.ts). Runs written before 0.6 have metrics.jsonl and state.json instead:
 * read here as records of epoch 0, so they still report and restart.
 */
import { runKeys } from '../artifacts/keys';
import { type ArtifactStore, sha256 } from '../artifacts/store';
import { FallbackRecord, FallbackRevertRecord, RunStateFile, StepRecord } from '../contracts/records';
import { winningState, winningSteps } from './winners';

export interface RunRecords {
  /** One winning record per step, by step. */
  steps: StepRecord[];
  /** Every step record there is (appended objects, then legacy metrics.jsonl lines not superseded). */
  all: StepRecord[];
  fallbacks: FallbackRecord[];
  /** Fallbacks undone (`ratchet fallback revert`). */
  reverts: FallbackRevertRecord[];
}

/** Appends a step record; a retry of the same record finds its own object. `created`: this call wrote it. */
export async function appendStepRecord(store: ArtifactStore, record: StepRecord): Promise<boolean> {
  const text = JSON.stringify(record);
  return (await store.putIfAbsent(runKeys.stepRecord(record.run_id, record.step, sha256(text)), text)).created;
}

/**
 * Appends a run state, then moves the state.json copy forward only if this state is newer (epoch, completed
 * step) than the copy: a stale attempt finishing late leaves it alone. (The copy is for people and older
 * tools; Ratchet reads the state records.)
 */
export async function appendState(store: ArtifactStore, state: RunStateFile): Promise<void> {
  const text = JSON.stringify(state);
  await store.putIfAbsent(runKeys.stateRecord(state.runId, state.epoch ?? 0, state.completedStep, sha256(text)), text);
  // A copy that does not parse (damaged, or written by hand) is replaced.
  const copy = await readJsonObject(store, runKeys.state(state.runId), RunStateFile).catch(() => undefined);
  if (copy && winningState([copy, state]) === copy && !sameState(copy, state)) return;
  await store.put(runKeys.state(state.runId), text);
}

const sameState = (a: RunStateFile, b: RunStateFile): boolean => (a.epoch ?? 0) === (b.epoch ?? 0) && a.completedStep === b.completedStep;

/** Appends a checkpoint fallback record. */
export async function appendFallback(store: ArtifactStore, fallback: FallbackRecord): Promise<void> {
  const text = JSON.stringify(fallback);
  await store.putIfAbsent(runKeys.fallbackRecord(fallback.run_id, fallback.epoch, sha256(text)), text);
}

/** Appends a fallback revert record (before the state it restores: a reader must know the voided epoch first). */
export async function appendRevert(store: ArtifactStore, revert: FallbackRevertRecord): Promise<void> {
  const text = JSON.stringify(revert);
  await store.putIfAbsent(runKeys.revertRecord(revert.run_id, revert.epoch, sha256(text)), text);
}

/** Every run state record (not state.json's copy): a revert restores the one before a fallback. */
export async function readStateRecords(store: ArtifactStore, runId: string): Promise<RunStateFile[]> {
  return readObjects(store, `${runKeys.records(runId)}/states`, RunStateFile);
}

/**
 * Every record of the run and the winning step records. A record object that does not parse fails loudly.
 * `legacy: false`: the appended records only (a reader with its own parser for metrics.jsonl: the report).
 */
export async function readRunRecords(store: ArtifactStore, runId: string, opts: { legacy?: boolean } = {}): Promise<RunRecords> {
  const appended = await readObjects(store, `${runKeys.records(runId)}/steps`, StepRecord);
  const fallbacks = await readObjects(store, `${runKeys.records(runId)}/fallbacks`, FallbackRecord);
  const reverts = await readObjects(store, `${runKeys.records(runId)}/reverts`, FallbackRevertRecord);
  const recorded = new Set(appended.map((r) => r.step));
  // A run started on 0.5 and carried on by 0.6 workers has both: an appended record wins over the line.
  const legacy = (opts.legacy === false ? [] : await readLegacyLines(store, runId)).filter((r) => !recorded.has(r.step));
  const all = [...legacy, ...appended];
  return { steps: winningSteps(all, fallbacks, reverts), all, fallbacks, reverts };
}

/** The run's current state: the winning state record, or (runs from before 0.6) state.json. */
export async function readRunState(store: ArtifactStore, runId: string): Promise<RunStateFile | undefined> {
  const states = await readStateRecords(store, runId);
  const copy = await readJsonObject(store, runKeys.state(runId), RunStateFile);
  return winningState(copy ? [...states, copy] : states);
}

async function readObjects<T>(store: ArtifactStore, prefix: string, schema: { parse(v: unknown): T }): Promise<T[]> {
  const keys = (await store.list(prefix)).filter((k) => k.endsWith('.json'));
  const out: T[] = [];
  for (const key of keys) {
    const v = await readJsonObject(store, key, schema);
    if (v !== undefined) out.push(v);
  }
  return out;
}

async function readJsonObject<T>(store: ArtifactStore, key: string, schema: { parse(v: unknown): T }): Promise<T | undefined> {
  const buf = await store.read(key);
  if (!buf) return undefined;
  let raw: unknown;
  try {
    raw = JSON.parse(buf.toString('utf8'));
  } catch (err) {
    throw new Error(`${store.url}/${key}: not valid JSON (${(err as Error).message}). Fix: remove the damaged object; records are written whole, so this one was changed by hand`);
  }
  return schema.parse(raw);
}

/** metrics.jsonl of a run written before 0.6: one record a line; a torn line (a crash mid-write) is skipped; a step written twice keeps its last line. */
async function readLegacyLines(store: ArtifactStore, runId: string): Promise<StepRecord[]> {
  const text = (await store.read(runKeys.metrics(runId)))?.toString('utf8') ?? '';
  const bySteps = new Map<number, StepRecord>();
  for (const l of text.split('\n')) {
    if (!l.trim()) continue;
    let raw: unknown;
    try {
      raw = JSON.parse(l);
    } catch {
      continue;
    }
    const r = StepRecord.parse(raw);
    bySteps.set(r.step, r);
  }
  return [...bySteps.values()];
}

/** The run's winning step records, by step. */
export async function readStepRecords(store: ArtifactStore, runId: string): Promise<StepRecord[]> {
  return (await readRunRecords(store, runId)).steps;
}
