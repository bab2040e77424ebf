import { z } from 'zod';
import { defineTool, type ToolContext } from '../../agent/tool';
import { readRepoFile, repoPath } from '../code-repair/apply-patch';
import { REPO_DIR } from '../../sandbox/interface';
import { formatExec, shq } from '../sandbox';
import { pytestCommand } from '../tests-run';
import { lastCommandOutput, pdbCommand, pdbStdin, type PdbSession } from './pdb';

const VIEW_DEFAULT_LINES = 120;

/** Pure: lines [start, end] (1-based, inclusive) with their numbers. */
export function numberLines(text: string, start: number, end: number): string {
  const lines = text.split('\n');
  if (lines.length > 0 && lines[lines.length - 1] === '') lines.pop();
  const s = Math.max(1, start);
  const e = Math.min(lines.length, end);
  const out: string[] = [];
  for (let i = s; i <= e; i++) out.push(`${String(i).padStart(5)}  ${lines[i - 1]}`);
  return out.length > 0 ? out.join('\n') : `(no lines in ${s}-${end}; the file has ${lines.length} lines)`;
}

/** Pure: replaces lines [start, end] (1-based, inclusive) with `content`. end = start - 1 inserts. */
export function rewriteLines(text: string, start: number, end: number, content: string): string {
  const trailing = text.endsWith('\n');
  const lines = text.split('\n');
  if (trailing) lines.pop();
  if (start < 1 || end < start - 1 || end > lines.length) {
    throw new RangeError(`line range ${start}-${end} is outside the file (1-${lines.length}); end = start - 1 inserts before start`);
  }
  const replacement = content === '' ? [] : content.replace(/\n$/, '').split('\n');
  lines.splice(start - 1, end - start + 1, ...replacement);
  return lines.length === 0 ? '' : lines.join('\n') + (trailing ? '\n' : '');
}

function session(ctx: ToolContext): PdbSession | undefined {
  return ctx.state.pdb as PdbSession | undefined;
}

export const debugTools = [
  defineTool({
    name: 'view',
    description: 'Show a file with line numbers, optionally a line range.',
    args: z.object({
      path: z.string().min(1).describe('File path relative to the repository root'),
      start: z.number().int().positive().optional().describe('First line (default 1)'),
      end: z.number().int().positive().optional().describe(`Last line (default start + ${VIEW_DEFAULT_LINES - 1})`),
    }),
    async run({ path, start, end }, ctx) {
      const rel = repoPath(path);
      const s = start ?? 1;
      return { content: numberLines(await readRepoFile(ctx, rel), s, end ?? s + VIEW_DEFAULT_LINES - 1) };
    },
  }),
  defineTool({
    name: 'listdir',
    description: 'List a directory of the repository (two levels deep).',
    args: z.object({ path: z.string().optional().describe('Directory relative to the repository root (default: the root)') }),
    async run({ path }, ctx) {
      const rel = path ? repoPath(path) : '.';
      const cmd = `find ${shq(rel)} -maxdepth 2 -not -path '*/.git*' -not -name '__pycache__' | sort | head -200`;
      const r = await ctx.sandbox.exec(cmd, { cwd: REPO_DIR, timeoutMs: ctx.execTimeoutMs });
      return { content: formatExec(r), command: 'find', error: r.exitCode !== 0 };
    },
  }),
  defineTool({
    name: 'eval',
    description: "Run the task's failing tests and the tests that must keep passing; shows pytest's output.",
    args: z.object({}),
    async run(_args, ctx) {
      const ids = [...ctx.task.FAIL_TO_PASS, ...ctx.task.PASS_TO_PASS];
      const cmd = pytestCommand(ctx.task.test_cmd, ids, ['-q', '-x']);
      const r = await ctx.sandbox.exec(cmd, { cwd: REPO_DIR, timeoutMs: ctx.execTimeoutMs });
      return { content: formatExec(r), command: 'pytest' };
    },
  }),
  defineTool({
    name: 'pdb',
    description: 'Send one command to a pdb session debugging a failing test (b file:line, c, n, s, p expr, l, w...). "restart" starts over.',
    args: z.object({
      command: z.string().min(1).describe('A pdb command'),
      test: z.string().optional().describe('Test id to debug (default: the first failing test); changing it restarts'),
    }),
    async run({ command, test }, ctx) {
      const target = test ?? ctx.task.FAIL_TO_PASS[0];
      if (!target) return { content: 'Error: this task names no failing test to debug', error: true };
      let s = session(ctx);
      if (!s || s.test !== target || command.trim() === 'restart') {
        s = { test: target, commands: [] };
        ctx.state.pdb = s;
        if (command.trim() === 'restart') return { content: `pdb session restarted on ${target}` };
      }
      s.commands.push(command);
      const r = await ctx.sandbox.exec(pdbCommand(ctx.task.test_cmd, target), { cwd: REPO_DIR, timeoutMs: ctx.execTimeoutMs, stdin: pdbStdin(s.commands) });
      if (r.timedOut) {
        s.commands.pop();
        return { content: `[pdb timed out after ${Math.round(r.durationMs / 1000)}s; the command was dropped from the session]`, error: true, command: 'pdb' };
      }
      return { content: lastCommandOutput(r.stdout, s.commands.length) || '(no output)', command: 'pdb' };
    },
  }),
  defineTool({
    name: 'rewrite',
    description: 'Replace lines start..end (inclusive, 1-based) of a file with new content.',
    args: z.object({
      path: z.string().min(1).describe('File path relative to the repository root'),
      start: z.number().int().positive(),
      end: z.number().int().nonnegative(),
      content: z.string().describe('The new lines (no line numbers)'),
    }),
    async run({ path, start, end, content }, ctx) {
      const rel = repoPath(path);
      const before = await readRepoFile(ctx, rel);
      let after: string;
      try {
        after = rewriteLines(before, start, end, content);
      } catch (err) {
        return { content: `Error: ${(err as Error).message}`, error: true };
      }
      await ctx.sandbox.writeFile(`${REPO_DIR}/${rel}`, after);
      const shown = content.split('\n').length;
      return { content: `Rewrote ${rel} lines ${start}-${end}. Now:\n${numberLines(after, Math.max(1, start - 2), start + shown + 1)}` };
    },
  }),
];
