/**
 * The scripted debug and code-repair solvers (src/sft/solvers/): their plans from a gold patch,
 * checked against an independent computation (the plan's edits, replayed with the environments'
 * own pure edit functions, give the file git's diff describes), and whole demonstrations through
 * the rollout activity on a host-directory sandbox (real pytest, real tool outputs), tokenized
 * with the model's template where SmolLM2 is converted.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { applySearchReplace } from '../../../src/envs/code-repair/apply-patch';
import { rewriteLines } from '../../../src/envs/debug/tools';
import { makeDemonstrations } from '../../../src/sft/demos';
import { codeRepairPlan } from '../../../src/sft/solvers/codeRepair';
import { debugPlan } from '../../../src/sft/solvers/debug';
import { GoldPatchError, parseGoldPatch } from '../../../src/sft/solvers/goldPatch';
import { sftSegments } from '../../../src/sft/trajectories';
import { loadModelTokenizer } from '../../../src/samples/tokenizer';
import { SMOLLM2_DIR, smolLM2Available } from '../../fixtures/samples/simulate';
import { CALC_FILES, FakeSandboxManager } from '../../helpers/rolloutFakes';

jest.setTimeout(60_000);

const CALC_GOLD = [
  'diff --git a/pkg/calc.py b/pkg/calc.py',
  'index 1111111..2222222 100644',
  '--- a/pkg/calc.py',
  '+++ b/pkg/calc.py',
  '@@ -1,5 +1,5 @@',
  ' def add(a, b):',
  '-    return a - b',
  '+    return a + b',
  ' ',
  ' ',
  ' def sub(a, b):',
  '',
].join('\n');

/** A real git diff of `before` -> `after` for `file` (git computes it; the solvers never see `after`). */
function gitDiff(file: string, before: string, after: string): string {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-gold-'));
  const git = (...args: string[]) => execFileSync('git', ['-c', 'user.email=t@t', '-c', 'user.name=t', ...args], { cwd: dir }).toString();
  git('init', '-q');
  execFileSync('mkdir', ['-p', path.dirname(path.join(dir, file))]);
  writeFileSync(path.join(dir, file), before);
  git('add', '.');
  git('commit', '-qm', 'base');
  writeFileSync(path.join(dir, file), after);
  return git('diff');
}

describe('gold patch -> plan', () => {
  test('parses a hunk: its old and new lines, and the changed span without context', () => {
    const [f] = parseGoldPatch(CALC_GOLD);
    expect(f!.path).toBe('pkg/calc.py');
    expect(f!.hunks).toEqual([{
      oldStart: 1,
      oldLines: ['def add(a, b):', '    return a - b', '', '', 'def sub(a, b):'],
      newLines: ['def add(a, b):', '    return a + b', '', '', 'def sub(a, b):'],
      change: { start: 2, removed: ['    return a - b'], added: ['    return a + b'] },
    }]);
  });

  test('code-repair: view, one apply_patch a hunk, the failing tests, a summary', () => {
    const { plan, final } = codeRepairPlan({ patch: CALC_GOLD, FAIL_TO_PASS: ['tests/test_calc.py::test_add'], test_cmd: 'python3 -m pytest' });
    expect(plan).toEqual([
      { tool: 'shell', args: { command: "sed -n '1,8p' 'pkg/calc.py'" } },
      { tool: 'apply_patch', args: { path: 'pkg/calc.py', search: 'def add(a, b):\n    return a - b\n\n\ndef sub(a, b):', replace: 'def add(a, b):\n    return a + b\n\n\ndef sub(a, b):' } },
      { tool: 'shell', args: { command: "python3 -m pytest -p no:cacheprovider -q 'tests/test_calc.py::test_add'" } },
    ]);
    expect(final).toBe('Fixed the bug in pkg/calc.py: `return a - b` is now `return a + b`. The failing tests pass now.');
  });

  test('debug: eval, view, rewrite the changed lines, eval, a summary', () => {
    const { plan } = debugPlan({ patch: CALC_GOLD });
    expect(plan).toEqual([
      { tool: 'eval', args: {} },
      { tool: 'view', args: { path: 'pkg/calc.py', start: 1, end: 8 } },
      { tool: 'rewrite', args: { path: 'pkg/calc.py', start: 2, end: 2, content: '    return a + b' } },
      { tool: 'eval', args: {} },
    ]);
  });

  test('several hunks (a change, an insertion, a deletion): the plans\' edits give the file git\'s diff describes', () => {
    const lines = Array.from({ length: 40 }, (_, i) => `def f${i}(x):\n    return x + ${i}\n`);
    const before = lines.join('\n');
    const afterLines = [...lines];
    afterLines[2] = 'def f2(x):\n    return x * 2\n';
    afterLines[20] = `${lines[20]}\ndef g(x):\n    return -x\n`;
    afterLines.splice(33, 1);
    const after = afterLines.join('\n');
    const patch = gitDiff('pkg/mod.py', before, after);
    const [f] = parseGoldPatch(patch);
    expect(f!.hunks.length).toBe(3);
    // code-repair: search/replace, top to bottom, with the environment's own function.
    let repaired = before;
    for (const c of codeRepairPlan({ patch, FAIL_TO_PASS: [], test_cmd: 'pytest' }).plan.filter((p) => p.tool === 'apply_patch')) {
      const a = c.args as { search: string; replace: string };
      repaired = applySearchReplace(repaired, a.search, a.replace, 'pkg/mod.py');
    }
    expect(repaired).toBe(after);
    // debug: line-range rewrites, in the plan's order (bottom up), with the environment's own function.
    let debugged = before;
    const rewrites = debugPlan({ patch }).plan.filter((p) => p.tool === 'rewrite');
    expect(rewrites.map((r) => r.args.start)).toEqual([...rewrites.map((r) => r.args.start as number)].sort((x, y) => y - x));
    for (const r of rewrites) {
      const a = r.args as { start: number; end: number; content: string };
      debugged = rewriteLines(debugged, a.start, a.end, a.content);
    }
    expect(debugged).toBe(after);
  });

  test('a patch the edit tools cannot replay is a GoldPatchError naming why', () => {
    expect(() => parseGoldPatch('diff --git a/x.py b/x.py\nnew file mode 100644\n--- /dev/null\n+++ b/x.py\n@@ -0,0 +1 @@\n+x = 1\n')).toThrow(GoldPatchError);
    expect(() => parseGoldPatch('diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\n')).toThrow(/renames x.py to y.py/);
    expect(() => parseGoldPatch('')).toThrow(/no hunk/);
  });
});

describe('demonstrations through the rollout activity (host-directory sandbox, real pytest)', () => {
  const task = {
    instance_id: 'calc-1', repo: 'calc', base_commit: 'HEAD', problem_statement: 'add(2, 3) returns -1', patch: CALC_GOLD,
    FAIL_TO_PASS: ['tests/test_calc.py::test_add'], PASS_TO_PASS: ['tests/test_calc.py::test_sub'], gold_files: ['pkg/calc.py'],
    test_cmd: 'python3 -m pytest', source: { type: 'snapshot' as const, repo_path: 'repos/calc.git' },
  };

  test.each([
    ['debug', ['eval', 'view', 'rewrite', 'eval'], 'fail_to_pass'],
    ['code-repair', ['shell', 'apply_patch', 'shell'], 'tests_pass'],
  ])('%s: the gold patch\'s steps with real tool outputs, solved, kept, tokenized by the template', async (envId, tools, solved) => {
    const { kept, all, skipped } = await makeDemonstrations({
      envId, tasks: [task as never, { ...task, instance_id: 'calc-new-file', patch: 'diff --git a/n.py b/n.py\nnew file mode 100644\n' } as never],
      taskSetDir: '/tasks', sandboxes: new FakeSandboxManager(CALC_FILES), minReward: 1, concurrency: 1,
    });
    expect(skipped.map((s) => s.instance_id)).toEqual(['calc-new-file']);
    const t = all[0]!;
    expect(all).toHaveLength(1);
    expect(t.stop_reason).toBe('completed');
    expect(t.messages.filter((m) => m.role === 'assistant').map((m) => m.tool_calls?.[0]?.function.name ?? null)).toEqual([...tools, null]);
    const outputs = t.messages.filter((m) => m.role === 'tool').map((m) => m.content ?? '');
    if (envId === 'debug') {
      expect(outputs[0]).toMatch(/1 failed/); // the tests fail before the fix (real pytest in the sandbox)
      expect(outputs[1]).toContain('    2      return a - b'); // the real file, numbered
      expect(outputs.at(-1)).toMatch(/2 passed/);
    } else {
      expect(outputs[0]).toMatch(/^def add\(a, b\):\n    return a - b\n\n\ndef sub\(a, b\):\n    return a - b\n+\[exit code 0\]$/); // the real file
      expect(outputs[1]).toMatch(/^Patched pkg\/calc.py/);
      expect(outputs[2]).toMatch(/1 passed/);
    }
    expect(t.final.diff).toContain('+    return a + b');
    expect(t.reward!.components[solved]).toBe(1);
    expect(kept).toEqual([t]);
    expect(t.turns.every((x) => x.completion_token_ids === null)).toBe(true);
    if (!smolLM2Available()) {
      console.warn(`SKIPPED the template check: SmolLM2 is not converted at ${SMOLLM2_DIR}`);
      return;
    }
    const tok = loadModelTokenizer(SMOLLM2_DIR);
    const seg = sftSegments(t, tok, 'demo')[0]!;
    const masked = tok.decode(seg.ids.filter((_, i) => seg.mask[i] === 1));
    expect(masked).toContain('return a + b'); // the edit is a target
    expect(masked).not.toContain('[exit code 0]'); // a tool output never is
  });
});

// Keep the fixture honest: the gold patch applies to the fake repository with git itself.
test('CALC_GOLD applies to CALC_FILES with git apply', () => {
  const dir = mkdtempSync(path.join(tmpdir(), 'ratchet-calc-'));
  execFileSync('mkdir', ['-p', path.join(dir, 'pkg')]);
  writeFileSync(path.join(dir, 'pkg/calc.py'), CALC_FILES['pkg/calc.py']);
  writeFileSync(path.join(dir, 'gold.diff'), CALC_GOLD);
  execFileSync('git', ['apply', 'gold.diff'], { cwd: dir });
  expect(readFileSync(path.join(dir, 'pkg/calc.py'), 'utf8')).toBe(CALC_FILES['pkg/calc.py'].replace('return a - b', 'return a + b'));
});
