import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { isEvalResultKey, runKeys } from '../artifacts/keys';
import { defaultStore } from '../artifacts/stores';
import { LocalArtifactStore, type ArtifactStore } from '../artifacts/store';
import { describeZodError } from '../config/load';
import { paths } from '../shared/paths';
import { EvalResult } from '../contracts/eval';
import { parseStepLine, type ReportStep } from './records';
import { readRunRecords } from '../records/runRecords';

/** A run's data in the artifact store does not exist or holds nothing to report. */
export class RunDataError extends Error {
  constructor(message: string, readonly kind: 'not-found' | 'empty' | 'invalid') {
    super(message);
    this.name = 'RunDataError';
  }
}

export function runDir(runId: string, artifactsRoot = paths.artifacts()): string {
  if (!/^[A-Za-z0-9._-]+$/.test(runId)) {
    throw new RunDataError(`run id "${runId}" is not valid: use letters, digits, ".", "_" and "-" only`, 'invalid');
  }
  return path.join(artifactsRoot, runKeys.run(runId));
}

/** A local directory (tests, benches) or a store; the default is this process's store (RATCHET_ARTIFACTS_URL or .ratchet/artifacts). */
export type StoreArg = string | ArtifactStore;
const toStore = (a?: StoreArg): ArtifactStore => (a === undefined ? defaultStore() : typeof a === 'string' ? new LocalArtifactStore(a) : a);

export async function runExists(runId: string, artifacts?: StoreArg): Promise<boolean> {
  runDir(runId);
  const store = toStore(artifacts);
  // A local run exists with its directory (even empty); an S3 prefix exists once it holds an object.
  if (store instanceof LocalArtifactStore) return fs.stat(store.localPath(runKeys.run(runId))).then((s) => s.isDirectory(), () => false);
  return store.list(runKeys.run(runId)).then((keys) => keys.length > 0, () => false);
}

/** Parses metrics.jsonl; a step written twice (a retried metrics activity) keeps its last record. */
export function parseStepRecords(text: string, file: string): ReportStep[] {
  const bySteps = new Map<number, ReportStep>();
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new RunDataError(`${file}:${i + 1}: not valid JSON (${(err as Error).message}). ` +
        'Fix: remove the broken line; the run keeps its other steps.', 'invalid');
    }
    const parsed = parseStepLine(raw);
    if (!parsed.success) {
      throw new RunDataError(`${file}:${i + 1}: not a step record:\n${describeZodError(`${file}:${i + 1}`, parsed.error)}`, 'invalid');
    }
    bySteps.set(parsed.data.step, parsed.data);
  });
  return [...bySteps.values()].sort((a, b) => a.step - b.step);
}

export async function loadStepRecords(runId: string, artifacts?: StoreArg): Promise<ReportStep[]> {
  const store = toStore(artifacts);
  runDir(runId);
  const key = runKeys.metrics(runId);
  const file = `${store.url}/${key}`;
  const buf = await store.read(key);
  if (!buf && !(await runExists(runId, store))) {
    throw new RunDataError(`run "${runId}" not found: nothing under ${store.url}/${runKeys.run(runId)}. ` +
      'Fix: check the id with `ratchet status`, or point RATCHET_ARTIFACTS_URL (or RATCHET_ARTIFACTS) at the store the run wrote to.', 'not-found');
  }
  // Appended records (0.6 on) win over metrics.jsonl lines (runs written before), step by step.
  const appended = (await readRunRecords(store, runId, { legacy: false })).steps;
  const have = new Set(appended.map((r) => r.step));
  const legacy = parseStepRecords(buf?.toString('utf8') ?? '', file).filter((r) => !have.has(r.step));
  const records = [...legacy, ...appended.map((r, i) => {
    const parsed = parseStepLine(r);
    if (!parsed.success) throw new RunDataError(`${store.url}/${runKeys.records(runId)} step ${r.step} (#${i}): not a step record:\n${describeZodError(`step ${r.step}`, parsed.error)}`, 'invalid');
    return parsed.data;
  })].sort((a, b) => a.step - b.step);
  if (records.length === 0) {
    throw new RunDataError(`run "${runId}" has no finished step yet (${file} is missing or empty), so there is nothing to report. ` +
      'Fix: wait for the first step to finish (`ratchet status ' + runId + '`), then run the report again.', 'empty');
  }
  return records;
}

/** Every eval result of the run, oldest policy version first; an unreadable file is skipped with a reason. */
export async function loadEvalResults(runId: string, artifacts?: StoreArg): Promise<{ results: EvalResult[]; skipped: string[] }> {
  const store = toStore(artifacts);
  runDir(runId);
  const results: EvalResult[] = [];
  const skipped: string[] = [];
  let keys: string[] = [];
  try {
    // runs/<run>/evals/<version>/<taskset-hash>.json (trajectories/ below it are not results)
    keys = (await store.list(runKeys.evals(runId))).filter(isEvalResultKey);
  } catch {
    return { results, skipped };
  }
  for (const key of keys) {
    const file = `${store.url}/${key}`;
    try {
      const parsed = EvalResult.safeParse(JSON.parse((await store.read(key))!.toString('utf8')));
      if (parsed.success) results.push(parsed.data);
      else skipped.push(`${file}: ${parsed.error.issues[0]?.path.join('.')}: ${parsed.error.issues[0]?.message}`);
    } catch (err) {
      skipped.push(`${file}: ${(err as Error).message}`);
    }
  }
  results.sort((a, b) => a.policy_version - b.policy_version || a.taskset.name.localeCompare(b.taskset.name));
  return { results, skipped };
}
