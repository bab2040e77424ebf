import { readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';

/**
 * Writes the first `n` rows of a JSONL task set to `outFile`, snapshot repository
 * paths made absolute (they are relative to the source set's folder), so the copy
 * works from any folder. `transform` rewrites each row (a task-set variant, e.g.
 * tasks/traceback.ts). Returns how many rows were written.
 */
export function writeTaskSubset(
  sourceFile: string, n: number, outFile: string,
  transform: (row: Record<string, unknown>) => Record<string, unknown> = (row) => row,
): number {
  const rows = readFileSync(sourceFile, 'utf8').split('\n').filter(Boolean).slice(0, n).map((line) => {
    const row = JSON.parse(line) as { source?: { type: string; repo_path?: string } };
    if (row.source?.type === 'snapshot' && row.source.repo_path) row.source.repo_path = path.resolve(path.dirname(sourceFile), row.source.repo_path);
    return JSON.stringify(transform(row as Record<string, unknown>));
  });
  writeFileSync(outFile, `${rows.join('\n')}\n`);
  return rows.length;
}
