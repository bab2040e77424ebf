/**
 * The debug and code-repair edit tools on a file longer than the exec output limit: `cat` shows
 * the model only the first output_limit_bytes, so the tools read the file whole through the
 * sandbox's file read and view or edit any part of it (they refused such files before).
 */
import type { ToolContext } from '../../../src/agent/tool';
import { applyPatchTool } from '../../../src/envs/code-repair/apply-patch';
import { debugTools } from '../../../src/envs/debug/tools';
import type { Sandbox } from '../../../src/sandbox/interface';

const LIMIT = 256;
const big = Array.from({ length: 60 }, (_, i) => `def f${i}(x):\n    return x + ${i}\n`).join('\n');

/** A sandbox whose exec output is capped at LIMIT bytes, as the real one is by sandbox.output_limit_bytes. */
function ctx(files: Record<string, string>, readFileFails = false): ToolContext & { files: Record<string, string> } {
  const sandbox: Sandbox = {
    async exec(command) {
      const m = /^cat -- '?([^']+)'?$/.exec(command);
      const text = m ? files[m[1]!] : undefined;
      if (text === undefined) return { exitCode: 1, stdout: '', stderr: 'No such file', timedOut: false, truncated: false, durationMs: 1 };
      return { exitCode: 0, stdout: text.slice(0, LIMIT), stderr: '', timedOut: false, truncated: text.length > LIMIT, durationMs: 1 };
    },
    async readFile(p) {
      if (readFileFails) throw new Error('readFile output exceeds 4194304 bytes');
      return files[p.replace(/^\/work\/repo\//, '')]!;
    },
    async writeFile(p, content) { files[p.replace(/^\/work\/repo\//, '')] = content; },
    async diff() { return ''; },
    async release() {},
  };
  return { sandbox, task: {} as never, state: {}, execTimeoutMs: 1000, files };
}

const tool = (name: string) => debugTools.find((t) => t.name === name)!;

test('view shows lines past the output limit; rewrite and apply_patch edit them', async () => {
  const c = ctx({ 'pkg/big.py': big });
  expect(big.length).toBeGreaterThan(LIMIT * 4);
  const view = await tool('view').run({ path: 'pkg/big.py', start: 178, end: 179 }, c);
  expect(view.content).toBe('  178  def f59(x):\n  179      return x + 59');
  await tool('rewrite').run({ path: 'pkg/big.py', start: 179, end: 179, content: '    return x - 59' }, c);
  expect(c.files['pkg/big.py']).toBe(big.replace('return x + 59', 'return x - 59'));
  await applyPatchTool.run({ path: 'pkg/big.py', search: '    return x + 58', replace: '    return 58' }, c);
  expect(c.files['pkg/big.py']).toBe(big.replace('return x + 59', 'return x - 59').replace('return x + 58', 'return 58'));
});

test('a file too large even for the file read is the model\'s error, naming the file', async () => {
  await expect(tool('view').run({ path: 'pkg/big.py' }, ctx({ 'pkg/big.py': big }, true))).rejects.toThrow(/pkg\/big.py is too large to read .*edit it with the shell/);
});
