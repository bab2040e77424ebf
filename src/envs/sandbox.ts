/** What environments' tools make of a sandbox exec: the observation text, shell quoting. */
import type { ExecResult } from '../sandbox/interface';

/** A tool observation from an exec: exit code, both streams, and why it was cut short. */
export function formatExec(r: ExecResult): string {
  const parts: string[] = [];
  if (r.stdout) parts.push(r.stdout.trimEnd());
  if (r.stderr) parts.push(`[stderr]\n${r.stderr.trimEnd()}`);
  if (r.truncated) parts.push('[output truncated: narrow the command, e.g. pipe through head or grep]');
  if (r.timedOut) parts.push(`[timed out after ${Math.round(r.durationMs / 1000)}s and was killed]`);
  parts.push(`[exit code ${r.exitCode ?? 'none'}]`);
  return parts.join('\n');
}

/** Single-quotes a string for bash. */
export function shq(s: string): string {
  return `'${s.replace(/'/g, `'\\''`)}'`;
}
