/**
 * BENCHMARKS.md sections owned by a bench: each bench writes its block between
 * `<!-- bench:<name> begin -->` and `<!-- bench:<name> end -->`, replacing the
 * previous block, or appends one where there is none yet.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { REPO_ROOT } from '../shared/paths';

export const BENCHMARKS_FILE = path.join(REPO_ROOT, 'BENCHMARKS.md');

/** Writes `lines` as bench `name`'s section and returns the section's text. */
export function writeBenchSection(name: string, lines: string[], file = BENCHMARKS_FILE): string {
  const begin = `<!-- bench:${name} begin -->`;
  const end = `<!-- bench:${name} end -->`;
  const section = [begin, ...lines, end].join('\n');
  const doc = readFileSync(file, 'utf8');
  const at = doc.indexOf(begin);
  const stop = doc.indexOf(end);
  const next = at >= 0 && stop > at
    ? doc.slice(0, at) + section + doc.slice(stop + end.length)
    : `${doc.trimEnd()}\n\n${section}\n`;
  writeFileSync(file, next);
  return section;
}

/** One line naming the machine a figure was measured on. */
export function machineLine(): string {
  const cpu = os.cpus();
  return `${cpu[0]?.model?.trim() ?? 'unknown CPU'}, ${cpu.length} cores, ${Math.round(os.totalmem() / 2 ** 30)} GiB; ${new Date().toISOString().slice(0, 10)}`;
}
