import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import { describeZodError } from '../config/load';
import { paths } from '../shared/paths';
import { AnyStepRecord, EvalResult, type StepRecord } from './records';

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
  return path.join(artifactsRoot, 'runs', runId);
}

export async function runExists(runId: string, artifactsRoot = paths.artifacts()): Promise<boolean> {
  try {
    return (await fs.stat(runDir(runId, artifactsRoot))).isDirectory();
  } catch {
    return false;
  }
}

/** Parses metrics.jsonl; a step written twice (a retried metrics activity) keeps its last record. */
export function parseStepRecords(text: string, file: string): StepRecord[] {
  const bySteps = new Map<number, StepRecord>();
  text.split('\n').forEach((line, i) => {
    if (!line.trim()) return;
    let raw: unknown;
    try {
      raw = JSON.parse(line);
    } catch (err) {
      throw new RunDataError(`${file}:${i + 1}: not valid JSON (${(err as Error).message}). ` +
        'Fix: remove the broken line; the run keeps its other steps.', 'invalid');
    }
    const parsed = AnyStepRecord.safeParse(raw);
    if (!parsed.success) {
      throw new RunDataError(`${file}:${i + 1}: not a step record:\n${describeZodError(`${file}:${i + 1}`, parsed.error)}`, 'invalid');
    }
    bySteps.set(parsed.data.step, parsed.data);
  });
  return [...bySteps.values()].sort((a, b) => a.step - b.step);
}

export async function loadStepRecords(runId: string, artifactsRoot = paths.artifacts()): Promise<StepRecord[]> {
  const dir = runDir(runId, artifactsRoot);
  if (!(await runExists(runId, artifactsRoot))) {
    throw new RunDataError(`run "${runId}" not found: no directory ${dir}. ` +
      'Fix: check the id with `ratchet status`, or point RATCHET_ARTIFACTS at the store the run wrote to.', 'not-found');
  }
  const file = path.join(dir, 'metrics.jsonl');
  let text = '';
  try {
    text = await fs.readFile(file, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const records = parseStepRecords(text, file);
  if (records.length === 0) {
    throw new RunDataError(`run "${runId}" has no finished step yet (${file} is missing or empty), so there is nothing to report. ` +
      'Fix: wait for the first step to finish (`ratchet status ' + runId + '`), then run the report again.', 'empty');
  }
  return records;
}

/** Every eval result of the run, oldest policy version first; an unreadable file is skipped with a reason. */
export async function loadEvalResults(runId: string, artifactsRoot = paths.artifacts()): Promise<{ results: EvalResult[]; skipped: string[] }> {
  const evalsDir = path.join(runDir(runId, artifactsRoot), 'evals');
  const results: EvalResult[] = [];
  const skipped: string[] = [];
  let versions: string[] = [];
  try {
    versions = await fs.readdir(evalsDir);
  } catch {
    return { results, skipped };
  }
  for (const v of versions) {
    let files: string[] = [];
    try {
      files = (await fs.readdir(path.join(evalsDir, v))).filter((f) => f.endsWith('.json'));
    } catch {
      continue;
    }
    for (const f of files) {
      const file = path.join(evalsDir, v, f);
      try {
        const parsed = EvalResult.safeParse(JSON.parse(await fs.readFile(file, 'utf8')));
        if (parsed.success) results.push(parsed.data);
        else skipped.push(`${file}: ${parsed.error.issues[0]?.path.join('.')}: ${parsed.error.issues[0]?.message}`);
      } catch (err) {
        skipped.push(`${file}: ${(err as Error).message}`);
      }
    }
  }
  results.sort((a, b) => a.policy_version - b.policy_version || a.taskset.name.localeCompare(b.taskset.name));
  return { results, skipped };
}
