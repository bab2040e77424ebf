/**
 * Version skew (issue 42, docs/upgrades.md): what a worker does with a payload a newer build wrote.
 * Every setting an activity worker reads (the step manifest, a rollout's input, the trainer_config)
 * was validated by the schema of the main worker that wrote it, and a key removed from the schema
 * stays readable under its old spelling for the support window. So a key or a choice the worker does
 * not know means one thing: a newer build wrote the payload, after adding a setting. Ignoring the
 * setting would train differently from what the run asked for; failing would fail the run at the
 * next release that adds one. The worker hands the task back instead (ConfigFromNewerBuild, retryable)
 * for a worker of the newer build to take; in a versioned deployment the task never reaches it.
 * Any other invalid value is the payload's own fault and fails as before.
 */
import { ApplicationFailure } from '@temporalio/common';
import type { ZodError } from 'zod';

export const CONFIG_FROM_NEWER_BUILD = 'ConfigFromNewerBuild';

/** The keys and choices of `error` that this code does not know ("sampling: unknown key 'x'"), or undefined when none. */
export function newerBuildIssues(error: ZodError): string | undefined {
  const issues = error.issues.flatMap((i) => {
    const at = i.path.join('.') || '(top level)';
    if (i.code === 'unrecognized_keys') return [`${at}: unknown key(s) ${i.keys.map((k) => `'${k}'`).join(', ')}`];
    if (i.code === 'invalid_enum_value') return [`${at}: unknown choice '${String(i.received)}'`];
    return [];
  });
  return issues.length ? issues.join('; ') : undefined;
}

/** The retryable failure that hands a task back to a newer worker. */
export function fromNewerBuild(what: string, issues: string): ApplicationFailure {
  return ApplicationFailure.create({
    type: CONFIG_FROM_NEWER_BUILD,
    nonRetryable: false,
    message: `${what} comes from a newer build of Ratchet than this worker (${issues}); this worker hands it back for a newer one. ` +
      'Fix: start this release\'s rollout workers (versioned: RATCHET_WORKER_VERSIONING=on, docs/upgrades.md), then stop the old ones',
  });
}
