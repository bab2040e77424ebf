import { z } from 'zod';
import { ToolError } from '../../agent/loop';
import { defineTool, type ToolContext } from '../../agent/tool';
import { REPO_DIR } from '../../sandbox/interface';
import { shq } from '../sandbox';
import { normalizePath } from '../shell';

/** Replaces `search` with `replace` in `text`; `search` must occur exactly once. Pure. */
export function applySearchReplace(text: string, search: string, replace: string, file: string): string {
  if (search === '') throw new ToolError(`search is empty; copy the exact lines to replace from ${file}`);
  const first = text.indexOf(search);
  if (first < 0) {
    throw new ToolError(`search text not found in ${file}. Copy it exactly from the file (whitespace and indentation included); view the file first, e.g. sed -n '1,80p' ${file}`);
  }
  const second = text.indexOf(search, first + 1);
  if (second >= 0) {
    const count = text.split(search).length - 1;
    throw new ToolError(`search text matches ${count} times in ${file}; include more surrounding lines so it matches exactly once`);
  }
  return text.slice(0, first) + replace + text.slice(first + search.length);
}

/**
 * Reads a repository file through the shell, so a missing file is the model's error, not the sandbox's.
 * A file longer than the exec output limit (sandbox.output_limit_bytes, which bounds what a command
 * shows the model) is read whole through the sandbox's file read: the tools show or change a part of
 * it, so its size is no reason to refuse it (a 20 KB module was not viewable or editable before).
 */
export async function readRepoFile(ctx: ToolContext, rel: string): Promise<string> {
  const r = await ctx.sandbox.exec(`cat -- ${shq(rel)}`, { cwd: REPO_DIR, timeoutMs: ctx.execTimeoutMs });
  if (r.exitCode !== 0) throw new ToolError(`cannot read ${rel}: ${r.stderr.trim() || 'no such file'}`);
  if (!r.truncated) return r.stdout;
  try {
    return await ctx.sandbox.readFile(`${REPO_DIR}/${rel}`);
  } catch (err) {
    throw new ToolError(`${rel} is too large to read (${(err as Error).message.slice(0, 200)}); edit it with the shell`);
  }
}

export function repoPath(rel: string): string {
  const clean = normalizePath(rel);
  if (clean === '' || clean.split('/').includes('..')) throw new ToolError(`path "${rel}" must be a file inside the repository, relative to its root`);
  return clean;
}

export const applyPatchTool = defineTool({
  name: 'apply_patch',
  description: 'Edit a file: replace the exact text `search` (which must occur exactly once in the file) with `replace`.',
  args: z.object({
    path: z.string().min(1).describe('File path relative to the repository root'),
    search: z.string().describe('Exact existing text to replace, including indentation'),
    replace: z.string().describe('New text'),
  }),
  async run({ path, search, replace }, ctx) {
    const rel = repoPath(path);
    const before = await readRepoFile(ctx, rel);
    const after = applySearchReplace(before, search, replace, rel);
    await ctx.sandbox.writeFile(`${REPO_DIR}/${rel}`, after);
    return { content: `Patched ${rel}: replaced ${search.split('\n').length} line(s) with ${replace.split('\n').length} line(s).` };
  },
});
