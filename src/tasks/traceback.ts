/**
 * The traceback variant of a localization task: the issue gains the Python
 * traceback of its first failing test, ending in the function the bug lives in.
 *
 * Why: taskgen's issues quote only the failing test and the exception's last line,
 * so finding the file means searching the repository, which SmolLM2-135M almost
 * never does usefully (bench:learn's first attempt: no correct file in 16 episodes).
 * Bug reports that carry a traceback are common (many SWE-bench issues do), and
 * reading one is a real skill with something to learn: the traceback names the test
 * file first and the library file last, and only the library file is the answer.
 * The frames come from the task's gold functions (no line numbers: the task set does
 * not record them), so the traceback says where the fault raises, as it does when a
 * mutated function fails in place. Pure: no I/O.
 */

interface LocalizationRow {
  repo?: string;
  problem_statement: string;
  FAIL_TO_PASS?: string[];
  gold_files?: string[];
  gold_functions?: string[];
}

/** `tests/test_x.py::TestC::test_y` → its file and last name. */
function testFrame(testId: string): string | undefined {
  const [file, ...names] = testId.split('::');
  if (!file || names.length === 0) return undefined;
  return `  File "${file}", in ${names[names.length - 1]!.replace(/\[.*\]$/, '')}`;
}

/** `pkg/mod.py::Class.method` → the file and the bare function name. */
function goldFrame(fn: string): string | undefined {
  const i = fn.indexOf('::');
  if (i <= 0) return undefined;
  const name = fn.slice(i + 2).split('.').pop();
  return name ? `  File "${fn.slice(0, i)}", in ${name}` : undefined;
}

export function tracebackFrames(row: LocalizationRow): string[] {
  const first = row.FAIL_TO_PASS?.[0];
  const test = first ? testFrame(first) : undefined;
  const gold = (row.gold_functions ?? []).map(goldFrame).filter((f): f is string => f !== undefined);
  // No gold function: the frame names the gold file alone, as a module-level failure would.
  if (gold.length === 0) gold.push(...(row.gold_files ?? []).map((f) => `  File "${f}", in <module>`));
  return [...(test ? [test] : []), ...gold];
}

/**
 * The row with its issue rewritten as a terse bug report: the title, then the
 * first failing test's traceback, ending in the exception line the issue quoted. The
 * test file and the library file each appear once, so copying the first path seen is
 * not enough: the answer is the frame outside the tests. Rows without gold locations
 * are returned unchanged.
 */
export function withTraceback<T extends LocalizationRow>(row: T): T {
  if (!(row.gold_functions?.length || row.gold_files?.length)) return row;
  // The title names the repository only: taskgen's titles also name the test file.
  const title = `${row.repo ?? 'the library'}: a test fails after a recent change`;
  const quoted = /Output of `[^`]+`:\n```\n([^\n]*)/.exec(row.problem_statement);
  const exception = quoted?.[1]?.trim() || 'AssertionError';
  const problem = [title, '', 'Traceback (most recent call last):', ...tracebackFrames(row), exception].join('\n');
  return { ...row, problem_statement: problem };
}

/** withTraceback for a raw JSONL row (writeTaskSubset's transform); the rows come from a task set that loads. */
export function tracebackVariant(row: Record<string, unknown>): Record<string, unknown> {
  return typeof row.problem_statement === 'string' ? withTraceback(row as unknown as LocalizationRow) as unknown as Record<string, unknown> : row;
}
