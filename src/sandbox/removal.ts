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

/**
 * Force-removes a container and its volumes: 'removed' by this call, 'gone' when dockerd had nothing left to
 * remove (404) or another removal is under way (409); throws what else dockerd said.
 */
export async function removeContainer(c: Pick<Docker.Container, 'remove'>): Promise<'removed' | 'gone'> {
  try {
    await c.remove({ force: true, v: true });
    return 'removed';
  } catch (err) {
    const status = dockerStatus(err);
    if (status !== 404 && status !== 409) throw err;
    return 'gone';
  }
}
