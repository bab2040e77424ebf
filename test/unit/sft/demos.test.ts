/**
 * The scripted swe-grep solver: its steps from what it reads, and a whole demonstration
 * through the rollout activity (a host-directory sandbox with a tiny project; the real
 * sandboxes are exercised by `ratchet demos`), which SFT then tokenizes with the
 * model's template.
 */
import { calledNames, definitionFromSearch, failingTest } from '../../../src/sft/solvers/sweGrep';
import { makeDemonstrations } from '../../../src/sft/demos';
import { sftSegments } from '../../../src/sft/trajectories';
import { loadModelTokenizer } from '../../../src/samples/tokenizer';
import { SMOLLM2_DIR, smolLM2Available } from '../../fixtures/samples/simulate';
import { CALC_FILES, FakeSandboxManager } from '../../helpers/rolloutFakes';

jest.setTimeout(60_000);

describe('sweGrepSolver steps', () => {
  test('the failing test, the names it calls, the definition found', () => {
    expect(failingTest('tests/test_io.py::TestSpooled::test_iter[a-b]')).toEqual({ file: 'tests/test_io.py', name: 'test_iter' });
    const src = [
      '12:    def test_iter(self):',
      '13-        flo = self.spooled_flo',
      '14-        flo.write_lines(make_lines(3))',
      '15-        assert list(iter(flo)) == [1, 2]',
      '16-        self.assertEqual(len(flo), 3)',
      '17-',
      '18-    def test_other(self):',
      '19-        other_helper()',
    ].join('\n');
    expect(calledNames(src, 'test_iter')).toEqual(['write_lines', 'make_lines']);
    const out = 'tests/helpers.py:3:def make_lines(n):\nboltons/ioutils.py:210:    def write_lines(self, lines):\n\n[exit code 0]';
    expect(definitionFromSearch(out, ['write_lines', 'make_lines'])).toEqual({ file: 'boltons/ioutils.py', name: 'write_lines' });
    expect(definitionFromSearch('[exit code 1]', ['x'])).toBeUndefined();
  });
});

describe('a demonstration through the rollout activity', () => {
  const task = {
    instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: '',
    FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: [], gold_files: ['pkg/calc.py'], test_cmd: 'python3 -m pytest',
    source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
  };

  test('reads the test, searches, answers: three turns, real tool outputs, full reward, tokenized by the template', async () => {
    const { kept, all } = await makeDemonstrations({
      envId: 'swe-grep', tasks: [task as never], taskSetDir: '/tasks', sandboxes: new FakeSandboxManager(CALC_FILES), minReward: 0.5,
    });
    const t = all[0]!;
    expect(t.stop_reason).toBe('completed');
    expect(t.turns).toHaveLength(3);
    const calls = t.messages.filter((m) => m.role === 'assistant').map((m) => m.tool_calls?.[0]?.function.name);
    expect(calls).toEqual(['bash', 'bash', 'result']);
    const outputs = t.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
    expect(outputs[0]).toContain('x = add(2, 3)'); // the test's source, read in the sandbox
    expect(outputs[1]).toMatch(/pkg\/calc\.py:1:def add/); // the search's real output
    expect(t.final).toMatchObject({ files: ['pkg/calc.py'] });
    expect(t.reward!.total).toBeGreaterThan(0.5);
    expect(kept).toEqual([t]);
    expect(t.turns.every((x) => x.completion_token_ids === null)).toBe(true);
    if (!smolLM2Available()) return;
    const seg = sftSegments(t, loadModelTokenizer(SMOLLM2_DIR), 'demo')[0]!;
    const tok = loadModelTokenizer(SMOLLM2_DIR);
    const masked = tok.decode(seg.ids.filter((_, i) => seg.mask[i] === 1));
    expect(masked).toContain('pkg/calc.py');
    expect(masked).not.toContain('x = add(2, 3)'); // a tool output is never a target
  });
});
