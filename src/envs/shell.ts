import { z } from 'zod';
import { defineTool, type Tool } from '../agent/tool';
import { REPO_DIR } from '../sandbox/interface';
import { formatExec } from './sandbox';

/**
 * A shell in the sandbox, cwd /work/repo: `bash` in swe-grep, `shell` in code-repair.
 * `commandDescription: false` sends the argument without a description (a shorter prompt).
 */
export function shellTool(name: string, description: string, opts: { commandDescription?: string | false } = {}): Tool {
  const command = z.string().min(1);
  const described = opts.commandDescription ?? 'A bash command, run in the repository root';
  return defineTool({
    name,
    description,
    args: z.object({ command: described === false ? command : command.describe(described) }),
    async run({ command }, ctx) {
      const r = await ctx.sandbox.exec(command, { cwd: REPO_DIR, timeoutMs: ctx.execTimeoutMs });
      return { content: formatExec(r), command, error: r.timedOut };
    },
  });
}

/** A repository-relative path, whatever prefix the model wrote. */
export function normalizePath(p: string): string {
  let s = p.trim().replace(/\\/g, '/');
  for (const prefix of [`${REPO_DIR}/`, 'a/', 'b/', './']) {
    if (s.startsWith(prefix)) s = s.slice(prefix.length);
  }
  while (s.startsWith('/')) s = s.slice(1);
  return s;
}
