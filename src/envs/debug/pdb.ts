import { shq } from '../sandbox';

/**
 * A pdb session that survives across tool calls without a long-lived process:
 * each call replays the session's commands into a fresh
 * `python3 -m pdb -m pytest -s <test>` and shows only the last command's output.
 * Tests are deterministic, so the replay reaches the same state; and nothing
 * needs to outlive an exec, which the sandbox kills (process group) by design.
 */
export const PDB_PROMPT = '(Pdb) ';

export interface PdbSession {
  test: string;
  commands: string[];
}

export function pdbCommand(testCmd: string, test: string): string {
  // `python3 -m pytest ...` becomes `python3 -m pdb -m pytest ...`; `-s` so pytest does not capture pdb's output.
  const pytestArgs = testCmd.replace(/^\s*python3?\s+-m\s+pytest\b/, '').replace(/^\s*pytest\b/, '').trim();
  return `python3 -m pdb -m pytest -s -q -p no:cacheprovider ${pytestArgs} ${shq(test)}`.replace(/\s+/g, ' ').trim();
}

/** The replayed stdin: every command, then `q` so the process ends even if the last command resumes it. */
export function pdbStdin(commands: string[]): string {
  return [...commands, 'q', 'q'].join('\n') + '\n';
}

/**
 * Output of the last of `commandCount` commands: pdb prints its prompt before
 * reading each command, so that output lies between prompt N and prompt N+1.
 */
export function lastCommandOutput(stdout: string, commandCount: number): string {
  const segments = stdout.split(PDB_PROMPT);
  if (commandCount === 0) return (segments[0] ?? '').trimEnd();
  const seg = segments[commandCount];
  if (seg === undefined) {
    // The program ended before reading that command: show how it ended.
    return `${(segments[segments.length - 1] ?? '').trimEnd()}\n[the debugged program finished before this command; start again with {"command": "restart"}]`;
  }
  return seg.trimEnd();
}
