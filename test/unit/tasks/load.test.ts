import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { loadTask, loadTasks, TaskLoadError } from '../../../src/tasks/load';
import { filesInPatch, goldFiles, Task } from '../../../src/tasks/schema';

const good = {
  instance_id: 'calc-1', repo: 'demo/calc', version: '1.0', base_commit: 'abc', problem_statement: 'add is wrong',
  patch: 'diff --git a/pkg/calc.py b/pkg/calc.py\n--- a/pkg/calc.py\n+++ b/pkg/calc.py\n@@ -1 +1 @@\n-x\n+y\n',
  test_patch: '', FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'],
  gold_files: ['pkg/calc.py'], gold_functions: ['pkg/calc.py::add'], mutation: { kind: 'binop', file: 'pkg/calc.py', line: 2 },
  test_cmd: 'python3 -m pytest', source: { type: 'snapshot', repo_path: 'repos/calc-1.0.git' }, split: 'train', created_by: 'taskgen',
};

function jsonl(rows: unknown[] | string): string {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'ratchet-tasks-'));
  const file = path.join(dir, 'train.jsonl');
  writeFileSync(file, typeof rows === 'string' ? rows : rows.map((r) => JSON.stringify(r)).join('\n') + '\n');
  return file;
}

describe('task schema', () => {
  test('our rows and SWE-bench rows (JSON-encoded test lists) both parse', () => {
    expect(Task.parse(good).FAIL_TO_PASS).toEqual(['tests/test_calc.py::test_add']);
    const swe = Task.parse({ ...good, FAIL_TO_PASS: '["a::b"]', PASS_TO_PASS: '[]', source: undefined, environment_setup_commit: 'x' });
    expect(swe.FAIL_TO_PASS).toEqual(['a::b']);
    expect(swe.environment_setup_commit).toBe('x');
  });
  test('source is a snapshot or an image', () => {
    expect(Task.parse({ ...good, source: { type: 'image', image: 'sweb.eval.x' } }).source).toEqual({ type: 'image', image: 'sweb.eval.x', repo_dir: '/testbed' });
    expect(Task.parse({ ...good, source: { type: 'image', image: 'x', repo_dir: '/src/repo' } }).source).toMatchObject({ repo_dir: '/src/repo' });
    expect(Task.safeParse({ ...good, source: { type: 'image', image: 'x', repo_dir: 'relative' } }).success).toBe(false);
    expect(Task.safeParse({ ...good, source: { type: 'snapshot' } }).success).toBe(false);
  });
  test('gold files come from the row, else from the patch', () => {
    expect(goldFiles(Task.parse(good))).toEqual(['pkg/calc.py']);
    expect(goldFiles(Task.parse({ ...good, gold_files: undefined }))).toEqual(['pkg/calc.py']);
    expect(filesInPatch('--- a/x.py\n+++ b/x.py\n')).toEqual(['x.py']);
  });
});

describe('loadTasks (JSONL)', () => {
  const rows = [good, { ...good, instance_id: 'calc-2', FAIL_TO_PASS: 'not json' }, { ...good, instance_id: 'calc-3', base_commit: undefined }, good];
  test('fatal by default: the error names file, row and field', async () => {
    const file = jsonl(rows);
    const err = await loadTasks(file).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(TaskLoadError);
    expect((err as Error).message).toContain(`${file}:2: field "FAIL_TO_PASS"`);
    expect((err as Error).message).toContain(`${file}:3: field "base_commit": Required`);
    expect((err as Error).message).toContain(`${file}:4: field "instance_id": duplicate of row 1`);
  });
  test('skip keeps every good row and reports each bad one', async () => {
    const { tasks, problems } = await loadTasks(jsonl(rows), { onInvalid: 'skip' });
    expect(tasks.map((t) => t.instance_id)).toEqual(['calc-1']);
    expect(problems.map((p) => [p.row, p.field])).toEqual([[2, 'FAIL_TO_PASS'], [3, 'base_commit'], [4, 'instance_id']]);
  });
  test('broken JSON lines are reported by line number; blank lines are ignored', async () => {
    const { tasks, problems } = await loadTasks(jsonl(`${JSON.stringify(good)}\n\n{"instance_id": \n`), { onInvalid: 'skip' });
    expect(tasks).toHaveLength(1);
    expect(problems).toEqual([expect.objectContaining({ row: 3, field: '(row)', message: expect.stringMatching(/not valid JSON/) })]);
  });
  test('loadTask finds one row or says which file lacks it', async () => {
    const file = jsonl([good]);
    expect((await loadTask(file, 'calc-1')).repo).toBe('demo/calc');
    await expect(loadTask(file, 'nope')).rejects.toThrow(/task "nope" is not in .*train.jsonl/);
  });
  test('unknown extension', async () => {
    await expect(loadTasks('/tmp/x.csv')).rejects.toThrow(/use .jsonl or .parquet/);
  });
});

describe('loadTasks (Parquet, SWE-bench style columns)', () => {
  const file = path.join(__dirname, '..', '..', 'fixtures', 'tasks', 'swebench-style.parquet');
  test('reads rows, decodes JSON-string test lists, reports the bad row', async () => {
    const { tasks, problems } = await loadTasks(file, { onInvalid: 'skip' });
    expect(tasks.map((t) => [t.instance_id, t.FAIL_TO_PASS])).toEqual([['demo__calc-1', ['tests/test_calc.py::test_add']]]);
    expect(tasks[0]!.created_at).toBe('2024-01-01');
    expect(problems).toEqual([expect.objectContaining({ file, row: 2, field: 'FAIL_TO_PASS' })]);
  });
});

describe('sandboxSource', () => {
  it('a snapshot task names its bare repo under the task set; an image task its repo_dir', async () => {
    const { sandboxSource } = await import('../../../src/rollouts/task');
    const base = {
      instance_id: 'i', repo: 'o/r', base_commit: 'a'.repeat(40), problem_statement: 'p', patch: '', test_patch: '',
      FAIL_TO_PASS: [], PASS_TO_PASS: [],
    };
    expect(sandboxSource(Task.parse({ ...base, source: { type: 'snapshot', repo_path: 'repos/r.git' } }), '/sets/a'))
      .toEqual({ repo: { hostPath: '/sets/a/repos/r.git', baseCommit: 'a'.repeat(40) } });
    expect(sandboxSource(Task.parse({ ...base, source: { type: 'image', image: 'sweb.eval.x86_64.o__r-1' } }), '/sets/a'))
      .toEqual({ image: 'sweb.eval.x86_64.o__r-1', imageRepo: { dir: '/testbed', baseCommit: 'a'.repeat(40) } });
    expect(() => sandboxSource(Task.parse(base), '/sets/a')).toThrow(/has no source/);
  });
});
