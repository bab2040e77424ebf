import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';

/**
 * A JSONL task set's rows, snapshot repository paths made absolute (they are relative
 * to the set's folder), so rows can be written to a set in any folder.
 */
export function readTaskRows(sourceFile: string): Record<string, unknown>[] {
  return readFileSync(sourceFile, 'utf8').split('\n').filter(Boolean).map((line) => {
    const row = JSON.parse(line) as { source?: { type: string; repo_path?: string } };
    if (row.source?.type === 'snapshot' && row.source.repo_path) row.source.repo_path = path.resolve(path.dirname(sourceFile), row.source.repo_path);
    return row as Record<string, unknown>;
  });
}

/** Writes rows (from readTaskRows) as a JSONL task set. */
export function writeTaskRows(rows: readonly Record<string, unknown>[], outFile: string): void {
  writeFileSync(outFile, `${rows.map((r) => JSON.stringify(r)).join('\n')}\n`);
}

/**
 * Writes the first `n` rows of a JSONL task set to `outFile` (readTaskRows: works from any
 * folder). `transform` rewrites each row (a task-set variant, e.g. tasks/traceback.ts).
 * Returns how many rows were written.
 */
export function writeTaskSubset(
  sourceFile: string, n: number, outFile: string,
  transform: (row: Record<string, unknown>) => Record<string, unknown> = (row) => row,
): number {
  const rows = readTaskRows(sourceFile).slice(0, n).map(transform);
  writeTaskRows(rows, outFile);
  return rows.length;
}
