/**
 * docs/errors.md's table of every error class (issue 39) against the code: every failure type the code
 * can hand a workflow (a TypeScript ApplicationFailure, a Python trainer ApplicationError, a type the
 * workflow records on a step) has a row saying whether it is retried, waited for, a step fault or fatal,
 * and every row names a type the code still has. The code's types are read from the source, not from a
 * list kept beside the table, so a new failure type without a row fails here.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(__dirname, '..', '..', '..');
const KINDS = ['retried', 'waited for', 'step fault', 'fatal'] as const;

function files(dir: string, ext: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? files(join(dir, e.name), ext) : e.name.endsWith(ext) ? [join(dir, e.name)] : []);
}

/** Failure types the TypeScript code creates, with a file that creates each. */
function tsTypes(): Map<string, string> {
  const out = new Map<string, string>();
  for (const file of files(join(ROOT, 'src'), '.ts')) {
    const text = readFileSync(file, 'utf8');
    if (!/ApplicationFailure/.test(text)) continue;
    const add = (t: string) => { if (!out.has(t)) out.set(t, file); };
    // ApplicationFailure.nonRetryable(message, 'Type', ...details?): the first literal after a comma that names a type
    // (the message is a template or a concatenation; a type-like literal after a comma is the 2nd argument).
    for (const m of text.matchAll(/ApplicationFailure\.(?:nonRetryable|retryable)\(/g)) {
      const call = text.slice(m.index!, m.index! + 1200).split(/ApplicationFailure\.(?:nonRetryable|retryable|create)\(/)[1]!;
      const lit = /,\s*'([A-Z][A-Za-z]+)'\s*[,)]/.exec(call);
      if (lit) add(lit[1]!);
    }
    for (const m of text.matchAll(/\btype:\s*'([A-Z][A-Za-z]+)'/g)) add(m[1]!);
    for (const m of text.matchAll(/static readonly type = '([A-Z][A-Za-z]+)'/g)) add(m[1]!);
    // A file's own failure helper: fail('Type', message).
    for (const m of text.matchAll(/\bfail\('([A-Z][A-Za-z]+)'/g)) add(m[1]!);
    // A type named by a constant: export const NAME = 'Type', used as `type: NAME`.
    for (const m of text.matchAll(/export const ([A-Z_]+) = '([A-Z][A-Za-z]+)';/g)) {
      if (new RegExp(`type: ${m[1]}\\b`).test(text)) add(m[2]!);
    }
  }
  return out;
}

/** Failure types the Python trainer hands the workflow. */
function pyTypes(): Map<string, string> {
  const out = new Map<string, string>();
  for (const file of files(join(ROOT, 'trainer', 'ratchet_trainer'), '.py')) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/\btype="([A-Z][A-Za-z]+)"/g)) if (!out.has(m[1]!)) out.set(m[1]!, file);
  }
  const worker = join(ROOT, 'trainer', 'ratchet_trainer', 'worker.py');
  const text = readFileSync(worker, 'utf8');
  // _NON_RETRYABLE: each error keeps its class name as its type (TrainerActivities._fail).
  const nonRetryable = /_NON_RETRYABLE = \(([^)]*)\)/.exec(text);
  expect(nonRetryable).not.toBeNull();
  for (const name of nonRetryable![1]!.split(',').map((s) => s.trim()).filter(Boolean)) out.set(name, worker);
  // _STEP_FAULTS: class -> type.
  const stepFaults = /_STEP_FAULTS = \{([^}]*)\}/.exec(text);
  expect(stepFaults).not.toBeNull();
  for (const m of stepFaults![1]!.matchAll(/"([A-Z][A-Za-z]+)"/g)) out.set(m[1]!, worker);
  const fault = /^PROCESS_FAULT = "([A-Z][A-Za-z]+)"/m.exec(text);
  expect(fault).not.toBeNull();
  out.set(fault![1]!, worker);
  return out;
}

/** docs/errors.md's table under "## Every error class": type -> kind. */
function docTable(): Map<string, string> {
  const doc = readFileSync(join(ROOT, 'docs', 'errors.md'), 'utf8');
  const at = doc.indexOf('## Every error class');
  expect(at).toBeGreaterThan(-1);
  const section = doc.slice(at).split(/\n## /)[0]!;
  const rows = new Map<string, string>();
  for (const line of section.split('\n')) {
    const cells = line.split('|').map((c) => c.trim());
    const m = /^`([A-Za-z]+)`$/.exec(cells[1] ?? '');
    if (!m) continue;
    expect(rows.has(m[1]!)).toBe(false);
    rows.set(m[1]!, cells[3] ?? '');
  }
  return rows;
}

describe('docs/errors.md: every error class and what the run does with it', () => {
  const table = docTable();
  const code = new Map([...tsTypes(), ...pyTypes()]);

  test('the code finds the types it must (the scan itself works)', () => {
    for (const t of ['StoreUnavailable', 'DiskFull', 'InvalidRolloutInput', 'EmptyBatch', 'TrainerFault', 'PoisonBatch', 'NonFiniteGradient', 'BatchError']) {
      expect(code.has(t)).toBe(true);
    }
  });

  test('every failure type in the code has a row', () => {
    const missing = [...code].filter(([t]) => !table.has(t)).map(([t, f]) => `${t} (${f.slice(ROOT.length + 1)})`);
    expect(missing).toEqual([]);
  });

  test('every row names a type the code has, and one of the four kinds', () => {
    expect([...table.keys()].filter((t) => !code.has(t))).toEqual([]);
    const bad = [...table].filter(([, kind]) => !KINDS.includes(kind as typeof KINDS[number]));
    expect(bad).toEqual([]);
  });
});
