/**
 * The sandbox bridge: the routes an external harness's environment class
 * (harness/ratchet_harness) calls to run commands and move files in its
 * rollout's sandbox. They are served by the rollout's own endpoint (same key),
 * so a harness can only ever touch its own sandbox. Every exec goes through the
 * sandbox's exec, with its timeout (capped at the run's exec_timeout_s), its
 * output cap, and every container limit: the bridge adds no way around them.
 */
import { performance } from 'node:perf_hooks';
import { programName } from '../agent/loop';
import type { ExecResult, Sandbox } from '../sandbox/interface';
import type { CommandLog } from '../endpoint/recorder';
import type { RouteHandler } from '../endpoint/server';

export interface BridgeOptions {
  sandbox: Sandbox;
  /** The run's per-exec cap ([sandbox] exec_timeout_s), ms. */
  execTimeoutMs: number;
  /** Default working directory (the repository). */
  workdir: string;
  /** Called on every exec: the liveness watchdog's clock. */
  progress?: () => void;
}

const str = (v: unknown, name: string): string => {
  if (typeof v !== 'string') throw new Error(`\`${name}\` must be a string`);
  return v;
};


export function bridgeRoutes(o: BridgeOptions, log: CommandLog): Record<string, RouteHandler> {
  const timed = async <T>(f: () => Promise<T>): Promise<T> => {
    const t = performance.now();
    try {
      return await f();
    } finally {
      log.toolsMs += performance.now() - t;
      o.progress?.();
    }
  };
  return {
    exec: async (raw, signal) => {
      const b = (raw ?? {}) as Record<string, unknown>;
      const command = str(b.command, 'command');
      const askedMs = typeof b.timeout_s === 'number' && b.timeout_s > 0 ? b.timeout_s * 1000 : o.execTimeoutMs;
      log.commands.push(programName(command));
      const r: ExecResult = await timed(() => o.sandbox.exec(command, {
        timeoutMs: Math.min(askedMs, o.execTimeoutMs),
        cwd: typeof b.cwd === 'string' && b.cwd !== '' ? b.cwd : o.workdir,
        ...(typeof b.stdin === 'string' ? { stdin: b.stdin } : {}),
        signal,
      }));
      if (r.exitCode !== 0) log.execErrors += 1;
      return { exit_code: r.exitCode, stdout: r.stdout, stderr: r.stderr, timed_out: r.timedOut, truncated: r.truncated };
    },
    read: async (raw) => {
      const p = str((raw as Record<string, unknown>)?.path, 'path');
      return { content: await timed(() => o.sandbox.readFile(p)) };
    },
    write: async (raw) => {
      const b = (raw ?? {}) as Record<string, unknown>;
      await timed(() => o.sandbox.writeFile(str(b.path, 'path'), str(b.content, 'content')));
      return { ok: true };
    },
    diff: async () => ({ diff: await timed(() => o.sandbox.diff()) }),
  };
}
