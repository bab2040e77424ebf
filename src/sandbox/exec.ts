import { performance } from 'node:perf_hooks';
import { Readable, Writable, type Duplex } from 'node:stream';
import type Docker from 'dockerode';
import type { ExecResult } from './interface';
import type { Logger } from '../shared/logger';
import { AGENT_USER } from './options';
import { OutputCollector } from './output';

/** What an exec returns: the one shape environments see (interface.ts), which this module implements. */
export type { ExecResult };

export interface ExecParams {
  docker: Docker;
  container: Docker.Container;
  /** argv run under the in-container timeout, e.g. ['bash', '-lc', command]. */
  argv: string[];
  timeoutMs: number;
  cwd: string;
  stdin?: string | Buffer;
  outputLimitBytes: number;
  signal?: AbortSignal;
  log: Logger;
  /** Defaults to HOST_SLACK_MS; tests shorten it. */
  hostSlackMs?: number;
}

/**
 * If the in-container `timeout` has not ended the exec this long after its
 * deadline, the host stops waiting and kills every process of the agent.
 */
export const HOST_SLACK_MS = 5_000;

/**
 * Kills every process in the container but PID 1 (tini), its first child (the
 * `sleep <max_lifetime_s>` that keeps the container up (options.ts): `kill -1` would take that one
 * too and stop the container) and the shell running the sweep. Bash builtins
 * only, so it still works when a fork bomb holds every pid: a first pass stops
 * (SIGSTOP) what it finds, so nothing forks while the next passes kill.
 */
const SWEEP = `read -r -a kids < /proc/1/task/1/children
keep=\${kids[0]:-0}
for k in "\${kids[@]}"; do (( k < keep )) && keep=$k; done
for sig in STOP KILL KILL KILL KILL KILL; do
  n=0
  for d in /proc/[0-9]*; do
    p=\${d#/proc/}
    [[ $p == 1 || $p == "$keep" || $p == $$ ]] && continue
    kill -$sig "$p" 2>/dev/null && n=$((n + 1))
  done
  [[ $sig == KILL ]] && (( n == 0 )) && break
done`;

const KILL_ALL = `${SWEEP}
exit 0`;

/**
 * Runs argv under coreutils `timeout -s KILL`, then, once it returns, sweeps
 * every other process of the sandbox: whatever the command left behind, in its
 * process group or not (`setsid`, `nohup … &`, a double fork, a fork bomb),
 * ends with the command, so the sandbox is as clean after an exec as before it
 * and the next exec starts with every pid and core free. stdin goes through
 * fd 3 because bash gives background jobs /dev/null as stdin. One exec runs at
 * a time in a sandbox (the agent loop is sequential), so the sweep never hits
 * a sibling exec.
 */
const WRAPPER = [
  'exec 3<&0',
  'timeout -s KILL "$1" "${@:2}" <&3 3<&- &',
  'p=$!',
  'exec 3<&-',
  'wait "$p"; rc=$?',
  SWEEP,
  'exit "$rc"',
].join('\n');

export class AbortError extends Error {
  override readonly name = 'AbortError';
  constructor(message = 'sandbox operation aborted') {
    super(message);
  }
}

export function wrapArgv(argv: string[], timeoutMs: number): string[] {
  if (!(timeoutMs > 0)) throw new Error(`exec timeout must be positive, got ${timeoutMs} ms`);
  return ['bash', '-c', WRAPPER, 'ratchet-exec', (timeoutMs / 1000).toFixed(3), ...argv];
}

/** Used when the host gives up on an exec (abort, or the command outlived the in-container timeout). */
export async function killAgentProcesses(container: Docker.Container, log: Logger): Promise<void> {
  try {
    const exec = await container.exec({ Cmd: ['bash', '-c', KILL_ALL], User: AGENT_USER, AttachStdout: false, AttachStderr: false });
    const res: unknown = await exec.start({ Detach: true });
    // The detached start still answers with an HTTP body; unread, it holds the socket open.
    if (res instanceof Readable) res.resume();
  } catch (err) {
    // At the pid limit even this exec may not start; release() still removes the container.
    log.warn({ err: String(err) }, 'could not kill the agent processes');
  }
}

export async function runExec(p: ExecParams): Promise<ExecResult> {
  if (p.signal?.aborted) throw new AbortError();
  const started = performance.now();
  const output = new OutputCollector(p.outputLimitBytes);
  const exec = await p.container.exec({
    Cmd: wrapArgv(p.argv, p.timeoutMs),
    User: AGENT_USER,
    WorkingDir: p.cwd,
    Env: [],
    AttachStdin: p.stdin !== undefined,
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  });
  const stream = (await exec.start({ hijack: true, stdin: p.stdin !== undefined })) as Duplex;
  p.docker.modem.demuxStream(stream, sink(output, 'stdout'), sink(output, 'stderr'));

  let hostTimedOut = false;
  let aborted = false;
  const finished = new Promise<void>((resolve) => {
    stream.once('end', resolve);
    stream.once('close', resolve);
    stream.once('error', (err) => {
      if (!hostTimedOut && !aborted) p.log.warn({ err: String(err) }, 'exec stream failed');
      resolve();
    });
  });
  const giveUp = () => {
    stream.destroy();
    void killAgentProcesses(p.container, p.log);
  };
  const timer = setTimeout(() => {
    hostTimedOut = true;
    p.log.warn({ timeoutMs: p.timeoutMs }, 'exec outlived its in-container timeout; killing from the host');
    giveUp();
  }, p.timeoutMs + (p.hostSlackMs ?? HOST_SLACK_MS));
  const onAbort = () => {
    aborted = true;
    giveUp();
  };
  p.signal?.addEventListener('abort', onAbort, { once: true });

  if (p.stdin !== undefined) stream.end(p.stdin);
  try {
    await finished;
  } finally {
    clearTimeout(timer);
    p.signal?.removeEventListener('abort', onAbort);
  }
  if (aborted) throw new AbortError();

  const exitCode = hostTimedOut ? null : await exitCodeOf(exec);
  const durationMs = performance.now() - started;
  return {
    exitCode,
    stdout: output.text('stdout'),
    stderr: output.text('stderr'),
    // 137 = SIGKILL; only the timeout's KILL lands at or after the deadline.
    timedOut: hostTimedOut || (exitCode === 137 && durationMs >= p.timeoutMs),
    truncated: output.truncated,
    durationMs,
  };
}

function sink(output: OutputCollector, stream: 'stdout' | 'stderr'): Writable {
  return new Writable({
    write(chunk: Buffer, _enc, cb) {
      output.push(stream, chunk);
      cb();
    },
  });
}

/** The stream can end a moment before dockerd records the exit code. */
async function exitCodeOf(exec: Docker.Exec): Promise<number | null> {
  for (let i = 0; i < 50; i++) {
    try {
      const info = await exec.inspect();
      if (!info.Running) return info.ExitCode ?? null;
    } catch {
      return null; // the container was removed under us (release mid-exec)
    }
    await new Promise((r) => setTimeout(r, 20));
  }
  return null;
}
