/**
 * The sandbox half of a rollout's cost: every container its episode and scoring
 * acquired, and, once each is released, Docker's figures for it (src/sandbox/usage.ts).
 * A wrapper around the worker's SandboxManager, one per rollout attempt; an attempt
 * that throws (and is retried) takes its figures with it.
 */
import type { AcquireOptions, Sandbox, SandboxManager } from '../sandbox/interface';
import type { SandboxCost } from '../contracts/trajectory';

export interface MeteredSandboxes extends SandboxManager {
  /** The containers acquired so far and what the released ones cost (seconds rounded to ms). */
  cost(): SandboxCost;
}

export function meterSandboxes(inner: SandboxManager): MeteredSandboxes {
  let containers = 0;
  let containerS = 0;
  let cpuS = 0;
  return {
    async acquire(opts: AcquireOptions): Promise<Sandbox> {
      const sandbox = await inner.acquire(opts);
      containers++;
      let counted = false;
      const release = sandbox.release.bind(sandbox);
      // Wrapped in place (not a copy): the sandbox keeps its class, which callers check.
      sandbox.release = async () => {
        await release();
        if (counted) return;
        counted = true;
        const u = sandbox.usage?.();
        if (u) {
          containerS += u.container_s;
          cpuS += u.cpu_s;
        }
      };
      return sandbox;
    },
    cost: () => ({ containers, container_s: round3(containerS), cpu_s: round3(cpuS) }),
  };
}

function round3(x: number): number {
  return Math.round(x * 1000) / 1000;
}
