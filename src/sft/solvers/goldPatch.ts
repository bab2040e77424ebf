/**
 * A task's gold patch (unified git diff) as the edits a demonstration makes: per file, each hunk's
 * old and new lines and where the change sits. Pure. The debug and code-repair solvers
 * (./debug.ts, ./codeRepair.ts) turn these into tool calls; a patch they cannot replay with the
 * environment's edit tools (a new, deleted or renamed file, a binary patch) is a GoldPatchError,
 * so the caller skips the task instead of recording a broken demonstration.
 */

export class GoldPatchError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'GoldPatchError';
  }
}

export interface Hunk {
  /** 1-based line of the hunk's first old line (context included). */
  oldStart: number;
  /** The hunk's lines in the file before (context and removed) and after (context and added). */
  oldLines: string[];
  newLines: string[];
  /** The changed span alone: context trimmed from both ends. `start` is 1-based in the old file. */
  change: { start: number; removed: string[]; added: string[] };
  /** The function or class git names in the hunk header ("@@ ... @@ def add(a, b):"), if any. */
  header?: string;
}

export interface FilePatch {
  path: string;
  hunks: Hunk[];
}

/** Parses a unified git diff of modified text files. */
export function parseGoldPatch(patch: string): FilePatch[] {
  const files: FilePatch[] = [];
  let file: FilePatch | undefined;
  let hunk: { oldStart: number; lines: { kind: ' ' | '-' | '+'; text: string }[]; header?: string; oldLeft: number; newLeft: number } | undefined;
  const flush = () => {
    if (hunk && file) file.hunks.push(finishHunk(hunk));
    hunk = undefined;
  };
  for (const line of patch.split('\n')) {
    if (hunk && (hunk.oldLeft > 0 || hunk.newLeft > 0)) {
      const kind = line[0];
      if (kind === ' ' || kind === '-' || kind === '+' || line === '') {
        const k = (line === '' ? ' ' : kind) as ' ' | '-' | '+';
        hunk.lines.push({ kind: k, text: line.slice(1) });
        if (k !== '+') hunk.oldLeft--;
        if (k !== '-') hunk.newLeft--;
        continue;
      }
      if (line.startsWith('\\')) continue; // "\ No newline at end of file"
      throw new GoldPatchError(`the gold patch's hunk in ${file?.path} ends early at "${line.slice(0, 60)}"`);
    }
    if (line.startsWith('\\')) continue;
    let m = /^diff --git a\/(.+?) b\/(.+)$/.exec(line);
    if (m) {
      flush();
      if (m[1] !== m[2]) throw new GoldPatchError(`the gold patch renames ${m[1]} to ${m[2]}; the edit tools cannot`);
      file = { path: m[1]!, hunks: [] };
      files.push(file);
      continue;
    }
    if (/^(new|deleted) file mode|^rename from|^Binary files|^GIT binary patch/.test(line)) {
      throw new GoldPatchError(`the gold patch of ${file?.path ?? 'a file'} is not a text edit of an existing file (${line.slice(0, 40)}); the edit tools cannot replay it`);
    }
    m = /^--- (?:a\/)?(.+?)(?:\t.*)?$/.exec(line);
    if (m) {
      if (m[1] === '/dev/null') throw new GoldPatchError('the gold patch creates a file; the edit tools cannot replay it');
      if (!file || file.path !== m[1]) {
        flush();
        file = { path: m[1]!, hunks: [] };
        files.push(file);
      }
      continue;
    }
    if (/^\+\+\+ /.test(line)) {
      if (line.includes('/dev/null')) throw new GoldPatchError(`the gold patch deletes ${file?.path}; the edit tools cannot replay it`);
      continue;
    }
    m = /^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@ ?(.*)$/.exec(line);
    if (m) {
      flush();
      if (!file) throw new GoldPatchError('the gold patch has a hunk before any file header');
      hunk = { oldStart: Number(m[1]), lines: [], oldLeft: m[2] === undefined ? 1 : Number(m[2]), newLeft: m[4] === undefined ? 1 : Number(m[4]), ...(m[5] ? { header: m[5].trim() } : {}) };
    }
  }
  flush();
  const withHunks = files.filter((f) => f.hunks.length > 0);
  if (withHunks.length === 0) throw new GoldPatchError('the gold patch has no hunk');
  return withHunks;
}

function finishHunk(h: { oldStart: number; lines: { kind: ' ' | '-' | '+'; text: string }[]; header?: string }): Hunk {
  const oldLines = h.lines.filter((l) => l.kind !== '+').map((l) => l.text);
  const newLines = h.lines.filter((l) => l.kind !== '-').map((l) => l.text);
  let lead = 0;
  while (lead < h.lines.length && h.lines[lead]!.kind === ' ') lead++;
  let tail = h.lines.length;
  while (tail > lead && h.lines[tail - 1]!.kind === ' ') tail--;
  const mid = h.lines.slice(lead, tail);
  // A hunk at the top of a new file starts at 0; its first line is line 1.
  const start = Math.max(1, h.oldStart) + lead;
  return {
    oldStart: Math.max(1, h.oldStart), oldLines, newLines, ...(h.header ? { header: h.header } : {}),
    change: { start, removed: mid.filter((l) => l.kind !== '+').map((l) => l.text), added: mid.filter((l) => l.kind !== '-').map((l) => l.text) },
  };
}

/** The function or class a hunk header names ("def add(a, b):" -> "add"), if any. */
export function headerName(h: Hunk): string | undefined {
  return /\b(?:def|class)\s+(\w+)/.exec(h.header ?? '')?.[1];
}

/** A one-line account of the fix for the demonstration's last message. */
export function fixSummary(files: FilePatch[]): string {
  const h = files[0]!.hunks[0]!;
  const where = headerName(h) ? ` in ${headerName(h)}()` : '';
  const was = h.change.removed.find((l) => l.trim())?.trim();
  const now = h.change.added.find((l) => l.trim())?.trim();
  const what = was && now ? `: \`${was}\` is now \`${now}\`` : '';
  const more = files.reduce((n, f) => n + f.hunks.length, 0) > 1 ? ' (and the other changes it needed)' : '';
  return `Fixed the bug in ${files[0]!.path}${where}${what}${more}. The failing tests pass now.`;
}
