/**
 * Waits for a workflow's result through a Temporal server that may restart meanwhile (the stack's
 * supervisor restarts a hung dev server; a cluster fails over). `handle.result()` long-polls the
 * history and throws a ServiceError when the server goes away, although the workflow goes on:
 * a bench or CLI that waits an hour must poll again, not die.
 */
import { ServiceError, type WorkflowHandle } from '@temporalio/client';

export interface AwaitResultOptions {
  /** How long the server may stay unreachable before the wait gives up (default 10 minutes). */
  unavailableForMs?: number;
  retryEveryMs?: number;
  onRetry?: (err: Error, downForMs: number) => void;
}

export async function awaitResult<T>(handle: Pick<WorkflowHandle, 'result'>, o: AwaitResultOptions = {}): Promise<T> {
  const limit = o.unavailableForMs ?? 10 * 60_000;
  const every = o.retryEveryMs ?? 5_000;
  let downSince: number | undefined;
  for (;;) {
    try {
      return await handle.result() as T;
    } catch (err) {
      // A workflow failure or termination is the answer; only the server's absence is waited out.
      if (!(err instanceof ServiceError)) throw err;
      downSince ??= Date.now();
      const down = Date.now() - downSince;
      if (down > limit) throw err;
      o.onRetry?.(err, down);
      await new Promise((r) => setTimeout(r, every));
    }
  }
}
