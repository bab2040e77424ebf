/**
 * Removing a sandbox container, one rule for every caller (a sandbox's release, the manager's retries of
 * leftovers, the janitor): dockerd answering 404 (gone) or 409 (a removal already under way) means there is
 * nothing left to do; anything else (dockerd down, an overlay still busy) is the caller's to retry.
 */
import type Docker from 'dockerode';

/** dockerd's HTTP status on a failed call (dockerode's statusCode); undefined for a connection error. */
export function dockerStatus(err: unknown): number | undefined {
  return (err as { statusCode?: number } | undefined)?.statusCode;
}

/** Force-removes a container and its volumes; resolves once it is gone or going, throws what else dockerd said. */
export async function removeContainer(c: Pick<Docker.Container, 'remove'>): Promise<void> {
  try {
    await c.remove({ force: true, v: true });
  } catch (err) {
    const status = dockerStatus(err);
    if (status !== 404 && status !== 409) throw err;
  }
}
