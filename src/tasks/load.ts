import { promises as fs } from 'node:fs';
import { Worker } from 'node:worker_threads';
import * as path from 'node:path';
import { componentLogger } from '../shared/logger';
import { Task, TASK_LIMITS } from './schema';
import { TaskSetupError } from './setupError';

const log = componentLogger('tasks');

/** One row that did not validate: enough to find and fix it. */
export interface TaskProblem {
  file: string;
  /** 1-based row number (line number for JSONL). */
  row: number;
  field: string;
  message: string;
}

export class TaskLoadError extends Error {
  constructor(readonly problems: TaskProblem[]) {
    super(problems.slice(0, 5).map(formatProblem).join('\n') +
      (problems.length > 5 ? `\n... and ${problems.length - 5} more` : '') +
      '\nFix: correct the rows, or load with onInvalid: "skip" to drop them with a warning.');
    this.name = 'TaskLoadError';
  }
}

export function formatProblem(p: TaskProblem): string {
  return `${p.file}:${p.row}: field "${p.field}": ${p.message}`;
}

export interface LoadOptions {
  /** "fatal" (default) throws on the first file with a bad row; "skip" drops bad rows and reports them. */
  onInvalid?: 'fatal' | 'skip';
}

export interface LoadResult {
  tasks: Task[];
  problems: TaskProblem[];
}

/** Loads a task file, JSONL or Parquet by extension, validating every row. */
export async function loadTasks(file: string, opts: LoadOptions = {}): Promise<LoadResult> {
  const raw = await readRows(file);
  const tasks: Task[] = [];
  const problems: TaskProblem[] = [];
  const seen = new Map<string, number>();
  for (const { row, value, parseError, bytes } of raw) {
    if (bytes !== undefined && bytes > TASK_LIMITS.row_bytes) {
      problems.push({ file, row, field: '(row)', message: `is ${bytes} bytes, over the ${TASK_LIMITS.row_bytes}-byte limit of a task row; move large data out of the row` });
      continue;
    }
    if (parseError) {
      problems.push({ file, row, field: '(row)', message: `not valid JSON: ${parseError}` });
      continue;
    }
    const parsed = Task.safeParse(value);
    if (!parsed.success) {
      // One problem per field: the first issue is the one that says what to fix.
      const fields = new Set<string>();
      for (const issue of parsed.error.issues) {
        const field = issue.path.join('.') || '(row)';
        if (fields.has(field)) continue;
        fields.add(field);
        problems.push({ file, row, field, message: issue.message });
      }
      continue;
    }
    const prev = seen.get(parsed.data.instance_id);
    if (prev !== undefined) {
      problems.push({ file, row, field: 'instance_id', message: `duplicate of row ${prev} ("${parsed.data.instance_id}")` });
      continue;
    }
    seen.set(parsed.data.instance_id, row);
    tasks.push(parsed.data);
  }
  if (problems.length > 0) {
    if ((opts.onInvalid ?? 'fatal') === 'fatal') throw new TaskLoadError(problems);
    for (const p of problems) log.warn({ ...p }, `skipping invalid task row: ${formatProblem(p)}`);
  }
  return { tasks, problems };
}

/** Parsed task files by path, reused while the file's mtime and size are unchanged: every rollout looks one task up. */
const cache = new Map<string, { key: string; byId: Map<string, Task>; count: number }>();

/** Finds one task by instance id; a missing id is an error naming the file. */
export async function loadTask(file: string, instanceId: string): Promise<Task> {
  const st = await fs.stat(file);
  const key = `${st.mtimeMs}:${st.size}`;
  let entry = cache.get(file);
  if (!entry || entry.key !== key) {
    const { tasks } = await loadTasks(file, { onInvalid: 'skip' });
    entry = { key, byId: new Map(tasks.map((t) => [t.instance_id, t])), count: tasks.length };
    cache.set(file, entry);
  }
  const task = entry.byId.get(instanceId);
  const tasks = { length: entry.count };
  if (!task) {
    throw new TaskSetupError(`task "${instanceId}" is not in ${file} (${tasks.length} valid rows). ` +
      'Fix: regenerate the task set, or sample ids from the same file the rollout reads.');
  }
  return task;
}

/** Resolves a dataset path from the config against the task set dir. */
export function resolveDataset(dataset: string, taskSetDir: string): string {
  return path.isAbsolute(dataset) ? dataset : path.join(taskSetDir, dataset);
}

interface RawRow { row: number; value?: unknown; parseError?: string; bytes?: number }

async function readRows(file: string): Promise<RawRow[]> {
  const ext = path.extname(file).toLowerCase();
  if (ext === '.jsonl' || ext === '.json' || ext === '.ndjson') return readJsonl(file);
  if (ext === '.parquet') return readParquet(file);
  throw new Error(`task file ${file} has extension "${ext}"; use .jsonl or .parquet`);
}

async function readJsonl(file: string): Promise<RawRow[]> {
  const text = await fs.readFile(file, 'utf8');
  const rows: RawRow[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    if (line.length > TASK_LIMITS.row_bytes) {
      // Not parsed at all: a huge row is refused before it costs memory twice.
      rows.push({ row: i + 1, bytes: Buffer.byteLength(line) });
      return;
    }
    try {
      rows.push({ row: i + 1, value: JSON.parse(line) as unknown });
    } catch (err) {
      rows.push({ row: i + 1, parseError: (err as Error).message });
    }
  });
  return rows;
}

/**
 * Parquet is decoded in a worker thread: a large task file does not stall the
 * activity worker's event loop (heartbeats), and the ESM-only hyparquet is
 * loaded by Node itself, whatever module system the caller runs under (jest).
 */
const PARQUET_WORKER = `
const { parentPort, workerData } = require('node:worker_threads');
const fs = require('node:fs');
const hyparquet = require(workerData.module);
const bytes = fs.readFileSync(workerData.file);
hyparquet.parquetReadObjects({ file: bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength) })
  .then((rows) => parentPort.postMessage({ rows }), (err) => parentPort.postMessage({ error: String(err && err.stack || err) }));
`;

async function readParquet(file: string): Promise<RawRow[]> {
  await fs.access(file);
  const rows = await new Promise<unknown[]>((resolve, reject) => {
    const worker = new Worker(PARQUET_WORKER, { eval: true, workerData: { file, module: require.resolve('hyparquet') } });
    worker.once('message', (m: { rows?: unknown[]; error?: string }) => {
      void worker.terminate();
      if (m.error !== undefined) reject(new Error(`cannot read Parquet task file ${file}: ${m.error}`));
      else resolve(m.rows ?? []);
    });
    worker.once('error', reject);
  });
  return rows.map((value, i) => ({ row: i + 1, value: normalizeParquetValue(value) }));
}

/** Parquet gives bigint for int64 columns; JSON-shaped rows are what the schema expects. */
function normalizeParquetValue(value: unknown): unknown {
  if (typeof value === 'bigint') return Number(value);
  if (Array.isArray(value)) return value.map(normalizeParquetValue);
  if (value && typeof value === 'object' && !(value instanceof Date)) {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalizeParquetValue(v)]));
  }
  return value;
}
