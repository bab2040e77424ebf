import { normalizePath } from '../shell';

/**
 * Unified-diff similarity to the gold patch (seed 004, Nano): per file, a
 * sequence-similarity ratio (difflib's Ratcliff/Obershelp `ratio()`) between the
 * two diffs' hunk lines, summed over files both diffs touch and divided by
 * max(gold files, generated files), so extra or missing files cost.
 * Only the changed lines (`+`/`-`) count: hunk headers and context depend on
 * line numbers and the diff tool's context width, not on whether the change is right.
 */

/** Changed lines (`+`, `-` prefixed, in order) of each file a unified diff touches. */
export function parseDiffFiles(diff: string): Map<string, string[]> {
  const files = new Map<string, string[]>();
  let current: string[] | undefined;
  let inHunk = false;
  const lines = diff.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    const git = /^diff --git a\/(\S+) b\/(\S+)/.exec(line);
    if (git) {
      current = [];
      files.set(normalizePath(git[2] as string), current);
      inHunk = false;
      continue;
    }
    if (line.startsWith('--- ') && (lines[i + 1] ?? '').startsWith('+++ ')) {
      const target = (lines[i + 1] as string).slice(4).split('\t')[0]!.trim();
      const source = line.slice(4).split('\t')[0]!.trim();
      const name = normalizePath(target === '/dev/null' ? source : target);
      if (!files.has(name)) files.set(name, []);
      current = files.get(name);
      inHunk = false;
      i += 1;
      continue;
    }
    if (line.startsWith('@@')) { inHunk = true; continue; }
    if (inHunk && current && (line.startsWith('+') || line.startsWith('-'))) current.push(line);
  }
  return files;
}

/** difflib.SequenceMatcher(None, a, b).ratio() without autojunk: 2 * matches / (len(a) + len(b)). */
export function sequenceRatio(a: string[], b: string[]): number {
  const total = a.length + b.length;
  if (total === 0) return 1;
  return (2 * matchingCount(a, 0, a.length, b, 0, b.length)) / total;
}

function matchingCount(a: string[], alo: number, ahi: number, b: string[], blo: number, bhi: number): number {
  if (alo >= ahi || blo >= bhi) return 0;
  // Longest common block (earliest in a, then in b, as difflib breaks ties).
  let bestI = alo;
  let bestJ = blo;
  let bestSize = 0;
  let prev = new Map<number, number>();
  for (let i = alo; i < ahi; i++) {
    const next = new Map<number, number>();
    for (let j = blo; j < bhi; j++) {
      if (a[i] !== b[j]) continue;
      const k = (prev.get(j - 1) ?? 0) + 1;
      next.set(j, k);
      if (k > bestSize) { bestI = i - k + 1; bestJ = j - k + 1; bestSize = k; }
    }
    prev = next;
  }
  if (bestSize === 0) return 0;
  return bestSize
    + matchingCount(a, alo, bestI, b, blo, bestJ)
    + matchingCount(a, bestI + bestSize, ahi, b, bestJ + bestSize, bhi);
}

/** Caps the work on a hostile, enormous diff: similarity over the first lines is enough signal. */
const MAX_LINES_PER_FILE = 2000;

export function diffSimilarity(generated: string, gold: string): number {
  const gen = parseDiffFiles(generated);
  const ref = parseDiffFiles(gold);
  const denom = Math.max(gen.size, ref.size);
  if (denom === 0) return 0;
  let sum = 0;
  for (const [file, goldLines] of ref) {
    const genLines = gen.get(file);
    if (!genLines) continue;
    sum += sequenceRatio(genLines.slice(0, MAX_LINES_PER_FILE), goldLines.slice(0, MAX_LINES_PER_FILE));
  }
  return sum / denom;
}
