/**
 * Which failures of a rollout belong to the infrastructure (Docker, a lost
 * container) rather than to the agent or the task, and what becomes of them:
 * retried by Temporal while attempts remain, then recorded as infra_error and
 * dropped, never scored.
 */
import { Context } from '@temporalio/activity';
import { ApplicationFailure } from '@temporalio/common';
import type { Sandbox } from '../sandbox/interface';
import type { Logger } from '../shared/logger';

/**
 * Errors that say the container or dockerd is gone, not that a command failed in it.
 * Docker's own words (dockerode passes them through) and the socket's error codes.
 */
export function isSandboxUnreachable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e?.code && ['ECONNREFUSED', 'ENOENT', 'ECONNRESET', 'EPIPE', 'ETIMEDOUT'].includes(e.code) && /docker|socket|connect/i.test(e.message ?? '')) return true;
  return /Cannot connect to the Docker daemon|No such container|is not running|connect ECONNREFUSED|connect ENOENT .*docker\.sock|socket hang up|dockerd/i.test(e?.message ?? '');
}

/** How long the probe of a sandbox after a failure may take. */
const PROBE_TIMEOUT_MS = 10_000;

/**
 * After a call into the sandbox failed: whether the container itself is lost. Either the
 * error already says so, or a trivial command (from `/`, which the agent cannot delete)
 * fails the same way. A failure with the container alive (the agent broke its
 * repository) is not a lost container.
 */
export async function isSandboxLost(err: unknown, sandbox: Sandbox): Promise<boolean> {
  if (isSandboxUnreachable(err)) return true;
  try {
    await sandbox.exec('true', { cwd: '/', timeoutMs: PROBE_TIMEOUT_MS });
    return false;
  } catch (probeErr) {
    return isSandboxUnreachable(probeErr);
  }
}

/**
 * Attempts of one rollout activity that an infrastructure failure may use before the
 * rollout is recorded as dropped (stop_reason infra_error). Below the workflows' own
 * maximumAttempts (4 for training, 3 for eval), so the last attempt records, not fails.
 */
export const INFRA_ATTEMPTS = 3;

/** This activity's attempt number; outside an activity (a direct call) there are no retries left. */
export function currentAttempt(): number {
  try {
    return Context.current().info.attempt;
  } catch {
    return INFRA_ATTEMPTS;
  }
}

/**
 * An infrastructure failure: throws a retryable InfrastructureError while attempts remain.
 * Returns on the last attempt, when the caller records the rollout as infra_error (the batch
 * builder and the step's reward statistics leave it out).
 */
export function retryInfrastructureFailure(cause: string, log: Logger, rolloutAttempt?: number): void {
  // In a chunk, the rollout's own tries (a rollout first run on the chunk's 3rd attempt has had none before).
  const attempt = rolloutAttempt ?? currentAttempt();
  if (attempt < INFRA_ATTEMPTS) {
    log.warn({ attempt, cause }, 'infrastructure failure: retrying the rollout');
    throw ApplicationFailure.create({ type: 'InfrastructureError', message: `infrastructure failure (attempt ${attempt}): ${cause}` });
  }
  log.warn({ attempt, cause }, 'infrastructure failure on every attempt: rollout dropped');
}

/** A failure that is the run's input, the same on every attempt: fails the step loudly. */
export function invalidRolloutTask(message: string): ApplicationFailure {
  return ApplicationFailure.nonRetryable(message, 'InvalidRolloutTask');
}

export async function nonRetryable<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw invalidRolloutTask((err as Error).message);
  }
}

/**
 * Errors of reading a file that a retry (later, or on another host) may not meet: too many open
 * files, an I/O error, a file not (yet) there, a stale network mount. docs/errors.md lists them.
 */
const TRANSIENT_READ_CODES = ['EMFILE', 'ENFILE', 'EIO', 'ENOENT', 'EAGAIN', 'EBUSY', 'EINTR', 'ESTALE', 'ETIMEDOUT', 'ENOTCONN', 'ECONNRESET', 'EHOSTDOWN', 'ENOMEM'];

export function isTransientReadError(err: unknown): boolean {
  const code = (err as NodeJS.ErrnoException | undefined)?.code;
  if (typeof code === 'string') return TRANSIENT_READ_CODES.includes(code);
  // The Parquet reader's thread reports fs errors as text.
  return new RegExp(`\\b(${TRANSIENT_READ_CODES.join('|')})\\b`).test((err as Error | undefined)?.message ?? '');
}
