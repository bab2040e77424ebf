/**
 * What one sandbox container cost, read from Docker's own records as it is removed:
 * CPU from its cgroup (the stats API's cpu_stats.cpu_usage.total_usage, read while it
 * still runs) and container-seconds from State.StartedAt to State.FinishedAt (after a
 * kill), so the figures match what `docker inspect` and `docker events` say.
 */
import type Docker from 'dockerode';
import { dockerStatus } from './removal';

export interface ContainerUsage {
  /** Docker's State.FinishedAt − State.StartedAt, in seconds. */
  container_s: number;
  /** CPU time the container's cgroup used (user + system), in seconds. */
  cpu_s: number;
}

const STOP_WAIT_MS = 10_000;

/** Reads the container's CPU, stops it and reads its start and finish times; undefined when Docker no longer knows it. */
export async function stopAndMeasure(container: Docker.Container): Promise<ContainerUsage | undefined> {
  let cpuNs = 0;
  try {
    // one-shot: no second sample for precpu_stats (API 1.41+); an exited container answers zeros.
    const stats = (await container.stats({ stream: false, 'one-shot': true } as { stream: false })) as { cpu_stats?: { cpu_usage?: { total_usage?: number } } };
    cpuNs = stats.cpu_stats?.cpu_usage?.total_usage ?? 0;
  } catch (err) {
    if (dockerStatus(err) === 404) return undefined;
  }
  try {
    await container.kill({ signal: 'SIGKILL' });
  } catch (err) {
    // 409: not running (its lifetime ended, or it died); 404: gone.
    if (dockerStatus(err) === 404) return undefined;
  }
  try {
    // Bounded: a dockerd that cannot stop it must not hold up the release (force-removal follows).
    const waited = await Promise.race([
      container.wait({ condition: 'not-running' }).then(() => true),
      new Promise<false>((r) => setTimeout(() => r(false), STOP_WAIT_MS).unref()),
    ]);
    if (!waited) return undefined;
    const state = (await container.inspect()).State;
    const started = Date.parse(state.StartedAt);
    const finished = Date.parse(state.FinishedAt);
    if (!Number.isFinite(started) || !Number.isFinite(finished) || finished < started) return { container_s: 0, cpu_s: cpuNs / 1e9 };
    return { container_s: (finished - started) / 1000, cpu_s: cpuNs / 1e9 };
  } catch (err) {
    if (dockerStatus(err) === 404) return undefined;
    throw err;
  }
}
