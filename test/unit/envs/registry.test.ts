import type { ToolContext } from '../../../src/agent/tool';
import { applySearchReplace } from '../../../src/envs/code-repair/apply-patch';
import { lastCommandOutput, pdbCommand, pdbStdin } from '../../../src/envs/debug/pdb';
import { numberLines, rewriteLines } from '../../../src/envs/debug/tools';
import { ENVIRONMENTS, getEnvironment } from '../../../src/envs/registry';
import { parsePytestSummary } from '../../../src/envs/tests';
import { Task } from '../../../src/tasks/schema';
import { CALC_FILES, HostDirSandbox, makeRepo } from '../../helpers/rolloutFakes';

const task = Task.parse({
  instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
  FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'], test_cmd: 'python3 -m pytest',
});

function ctx(): ToolContext & { sandbox: HostDirSandbox } {
  const { root, commit } = makeRepo(CALC_FILES);
  return { sandbox: new HostDirSandbox(root, commit), task, state: {}, execTimeoutMs: 30_000 };
}
const tool = (env: string, name: string) => getEnvironment(env).tools.find((t) => t.name === name)!;
const run = (env: string, name: string, args: unknown, c: ToolContext) => tool(env, name).run(tool(env, name).args.parse(args), c);

describe('environment registry', () => {
  test('the built-in environments with their tools; nano and mini-swe-agent are external harnesses', () => {
    expect(Object.fromEntries(Object.values(ENVIRONMENTS).map((e) => [e.id, e.tools.map((t) => t.name)]))).toEqual({
      'swe-grep': ['bash', 'result'], 'code-repair': ['shell', 'apply_patch'], debug: ['view', 'listdir', 'eval', 'pdb', 'rewrite'],
      harbor: ['shell', 'apply_patch'], nano: ['shell', 'apply_patch'], 'mini-swe-agent': ['shell', 'apply_patch'],
    });
    expect(Object.values(ENVIRONMENTS).filter((e) => e.harness).map((e) => e.harness!.name)).toEqual(['nano', 'mini-swe-agent']);
    expect(() => getEnvironment('nope')).toThrow(/unknown environment "nope"/);
  });
});

describe('apply_patch (search/replace, exactly once)', () => {
  test.each<[string, string, string, string | RegExp]>([
    ['once', 'a = 1\nb = 2\n', 'b = 2', 'a = 1\nc = 3\n'],
    ['not found', 'a = 1\n', 'b = 2', /not found in f.py.*Copy it exactly/],
    ['twice', 'x\nx\n', 'x', /matches 2 times.*more surrounding lines/],
    ['empty search', 'x\n', '', /search is empty/],
  ])('%s', (_n, text, search, expected) => {
    const go = () => applySearchReplace(text, search, 'c = 3', 'f.py');
    if (typeof expected === 'string') expect(go()).toBe(expected);
    else expect(go).toThrow(expected);
  });

  test('edits the work tree; the final diff is the unified diff', async () => {
    const c = ctx();
    const r = await run('code-repair', 'apply_patch', { path: 'pkg/calc.py', search: 'def add(a, b):\n    return a - b', replace: 'def add(a, b):\n    return a + b' }, c);
    expect(r.content).toMatch(/Patched pkg\/calc.py/);
    const final = await getEnvironment('code-repair').finalize(c, undefined);
    expect(final.diff).toMatch(/-    return a - b\n\+    return a \+ b/);
    await expect(run('code-repair', 'apply_patch', { path: 'nope.py', search: 'x', replace: 'y' }, c)).rejects.toThrow(/cannot read nope.py/);
    await expect(run('code-repair', 'apply_patch', { path: '../etc/passwd', search: 'x', replace: 'y' }, c)).rejects.toThrow(/inside the repository/);
    await c.sandbox.release();
  });
});

describe('debug tools', () => {
  test.each<[number, number, string]>([
    [1, 2, '    1  a\n    2  b'],
    [3, 9, '    3  c'],
    [5, 9, '(no lines in 5-9; the file has 3 lines)'],
  ])('numberLines(%i, %i)', (s, e, out) => expect(numberLines('a\nb\nc\n', s, e)).toBe(out));

  test.each<[number, number, string, string | RegExp]>([
    [2, 2, 'B', 'a\nB\nc\n'],
    [2, 3, 'X\nY\nZ', 'a\nX\nY\nZ\n'],
    [2, 1, 'new', 'a\nnew\nb\nc\n'],
    [1, 3, '', ''],
    [3, 5, 'x', /outside the file/],
  ])('rewriteLines(%i, %i)', (s, e, content, expected) => {
    const go = () => rewriteLines('a\nb\nc\n', s, e, content);
    if (typeof expected === 'string') expect(go()).toBe(expected);
    else expect(go).toThrow(expected);
  });

  test('view, listdir, rewrite and eval against a real work tree', async () => {
    const c = ctx();
    expect((await run('debug', 'view', { path: 'pkg/calc.py', start: 2, end: 2 }, c)).content).toBe('    2      return a - b');
    expect((await run('debug', 'listdir', {}, c)).content).toMatch(/pkg\/calc.py/);
    const before = await run('debug', 'eval', {}, c);
    expect(before.content).toMatch(/1 failed/);
    await run('debug', 'rewrite', { path: 'pkg/calc.py', start: 2, end: 2, content: '    return a + b' }, c);
    expect((await run('debug', 'eval', {}, c)).content).toMatch(/2 passed/);
    await c.sandbox.release();
  });

  test('pdb: a session across calls, replayed, showing only the last command output', async () => {
    const c = ctx();
    const first = await run('debug', 'pdb', { command: 'b pkg/calc.py:2' }, c);
    expect(first.content).toMatch(/Breakpoint 1 at .*calc.py:2/);
    const cont = await run('debug', 'pdb', { command: 'c' }, c);
    expect(cont.content).toMatch(/calc.py\(2\)add\(\)/);
    const p = await run('debug', 'pdb', { command: 'p a, b' }, c);
    expect(p.content.trim()).toBe('(2, 3)');
    expect(c.state.pdb).toEqual({ test: 'tests/test_calc.py::test_add', commands: ['b pkg/calc.py:2', 'c', 'p a, b'] });
    expect((await run('debug', 'pdb', { command: 'restart' }, c)).content).toMatch(/restarted/);
    await c.sandbox.release();
  }, 30_000); // real python + pdb subprocesses, replayed per call: seconds each on a loaded 2-core machine

  test('pdb helpers', () => {
    expect(pdbCommand('python3 -m pytest -x', 't.py::a')).toBe("python3 -m pdb -m pytest -s -q -p no:cacheprovider -x 't.py::a'");
    expect(pdbStdin(['n'])).toBe('n\nq\nq\n');
    expect(lastCommandOutput('start\n(Pdb) out1\n(Pdb) out2\n(Pdb) ', 2)).toBe('out2');
    expect(lastCommandOutput('start\n(Pdb) done', 3)).toMatch(/finished before this command/);
  });
});

describe('pytest -rA summary', () => {
  const out = [
    '==== short test summary info ====',
    'PASSED tests/test_calc.py::test_sub',
    'FAILED tests/test_calc.py::test_add - assert -1 == 5',
    'PASSED tests/test_x.py::test_teardown',
    'ERROR tests/test_x.py::test_teardown - RuntimeError',
    'SKIPPED [1] tests/test_y.py:3: no',
  ].join('\n');
  test('maps statuses; the worse of PASSED/ERROR counts; absent ids are missing', () => {
    expect(parsePytestSummary(out, ['tests/test_calc.py::test_add', 'tests/test_calc.py::test_sub', 'tests/test_x.py::test_teardown', 'tests/test_z.py::t'])).toEqual({
      'tests/test_calc.py::test_add': 'failed', 'tests/test_calc.py::test_sub': 'passed', 'tests/test_x.py::test_teardown': 'error', 'tests/test_z.py::t': 'missing',
    });
  });
});
