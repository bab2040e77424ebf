import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { writeTaskSubset } from '../../../src/tasks/subset';
import { tracebackFrames, tracebackVariant, withTraceback } from '../../../src/tasks/traceback';

// A taskgen-shaped row (the fields the variant reads), as in .ratchet/tasks/train.jsonl.
const row = {
  instance_id: 'boltons__x__1',
  repo: 'boltons',
  problem_statement: [
    'boltons: 1 test in tests/test_dictutils.py fails after a recent change', '',
    'Failing tests:', '- tests/test_dictutils.py::TestFrozen::test_frozendict[param]', '',
    'Output of `tests/test_dictutils.py::TestFrozen::test_frozendict[param]`:', '```',
    "AttributeError: 'NoneType' object has no attribute 'keys'", '```',
  ].join('\n'),
  FAIL_TO_PASS: ['tests/test_dictutils.py::TestFrozen::test_frozendict[param]'],
  gold_files: ['boltons/dictutils.py'],
  gold_functions: ['boltons/dictutils.py::FrozenDict.updated'],
  source: { type: 'snapshot', repo_path: 'repos/boltons.git' },
};

describe('traceback task variant', () => {
  test('frames: the failing test first, the gold function last, bare names', () => {
    expect(tracebackFrames(row)).toEqual([
      '  File "tests/test_dictutils.py", in test_frozendict',
      '  File "boltons/dictutils.py", in updated',
    ]);
  });

  test('the issue becomes the traceback: test file and library file once each, the exception kept, the answer not in the title', () => {
    const out = withTraceback(row);
    const p = out.problem_statement;
    expect(p.split('\n')[0]).toBe('boltons: a test fails after a recent change');
    expect(p).toContain("Traceback (most recent call last):\n  File \"tests/test_dictutils.py\"");
    expect(p.trimEnd().endsWith("AttributeError: 'NoneType' object has no attribute 'keys'")).toBe(true);
    expect(p.split('tests/test_dictutils.py').length - 1).toBe(1);
    expect(p.split('boltons/dictutils.py').length - 1).toBe(1);
    expect(out.gold_files).toEqual(row.gold_files);
    expect(row.problem_statement).toContain('Failing tests:'); // the input row is not mutated
  });

  test('a gold file without gold functions gets a module frame; a row with no gold location is unchanged', () => {
    const noFn = { ...row, gold_functions: [] };
    expect(tracebackFrames(noFn).at(-1)).toBe('  File "boltons/dictutils.py", in <module>');
    const noGold = { ...row, gold_files: [], gold_functions: [] };
    expect(withTraceback(noGold)).toBe(noGold);
  });

  test('writeTaskSubset applies it to raw rows and keeps snapshot paths absolute', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tb-'));
    const src = path.join(dir, 'train.jsonl');
    writeFileSync(src, `${JSON.stringify(row)}\n${JSON.stringify({ ...row, instance_id: 'b2' })}\n`);
    const out = path.join(dir, 'out', '..', 'tb.jsonl');
    expect(writeTaskSubset(src, 1, out, tracebackVariant)).toBe(1);
    const [written] = readFileSync(out, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l) as typeof row);
    expect(written!.problem_statement).toBe(withTraceback(row).problem_statement);
    expect(written!.source.repo_path).toBe(path.join(dir, 'repos/boltons.git'));
    expect(tracebackVariant({ id: 'no statement' })).toEqual({ id: 'no statement' });
  });
});
