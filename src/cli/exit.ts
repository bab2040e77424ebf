/**
 * Exit codes scripts can rely on (documented in `ratchet --help`).
 * Keep numbers stable: CI jobs and cron wrappers branch on them.
 */
export const EXIT = {
  ok: 0,
  /** The operation ran and failed (a workflow failed, an eval errored). */
  failure: 1,
  /** Bad flags or arguments. */
  usage: 2,
  /** The run, workflow or schedule named does not exist. */
  notFound: 3,
  /** The local stack (Temporal) is not reachable. */
  stackUnavailable: 4,
  /** An input file (run config, task set) failed validation. */
  invalidInput: 5,
  /** The target exists but has nothing to show yet (e.g. a report before the first finished step). */
  notReady: 6,
  /** Interrupted with Ctrl-C. */
  interrupted: 130,
} as const;

export const EXIT_HELP = `Exit codes:
  0    ok
  1    the operation failed (workflow failed, eval errored)
  2    usage error (bad flags or arguments)
  3    not found (run, workflow or schedule)
  4    stack unavailable (Temporal not reachable: run \`ratchet up\`)
  5    invalid input file (run config or task set failed validation)
  6    not ready (e.g. report for a run with no finished step yet)
  130  interrupted`;

/** An error the CLI prints as one clear message and turns into an exit code. */
export class CliError extends Error {
  constructor(message: string, readonly code: number = EXIT.failure) {
    super(message);
    this.name = 'CliError';
  }
}
