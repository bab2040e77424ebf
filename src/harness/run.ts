/**
 * One episode of an external agent harness (Nano, mini-swe-agent, any program):
 * a token-capturing endpoint for this rollout (src/endpoint/) with the sandbox
 * bridge on it, the harness started with the endpoint's socket and key, and the
 * recorded turns assembled into the AgentResult the built-in loop would return.
 *
 * Isolation (docs/environments.md#bring-your-own-agent): the harness runs on the
 * worker host, but in its own network, pid, ipc, uts and mount namespaces, as a
 * user id of its own with no capabilities. Its only network is loopback; it
 * reaches its endpoint through a unix socket in a per-rollout 0700 directory
 * only its user may enter, authenticated with a key it reads from stdin (never
 * argv or the environment, so no other process's /proc shows it). Every command it runs goes through the bridge into the rollout's
 * hardened sandbox. It gets none of the worker's environment variables.
 *
 * Whatever the harness does ends as an episode, never a stuck rollout: it
 * crashing, hanging past its time limit, exiting without a final answer or
 * flooding the endpoint ends with stop_reason "error" and a message saying
 * which; a limit of the rollout ends it with that limit's stop reason. Only the
 * inference server failing throws (the rollout is retried: infrastructure).
 */
import { spawn } from 'node:child_process';
import { randomInt } from 'node:crypto';
import { promises as fs } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AgentLimits, AgentResult } from '../agent/loop';
import type { TurnSampling } from '../agent/model';
import type { ToolContext } from '../agent/tool';
import type { StopReason, ToolSpec } from '../contracts/trajectory';
import { assembleResult, type CommandLog } from '../endpoint/recorder';
import { startEndpoint, type EndpointStop } from '../endpoint/server';
import type { Logger } from '../shared/logger';
import { bridgeRoutes } from './bridge';

/** How to start a harness: what an environment with an external agent declares. */
export interface HarnessSpec {
  /** Its name in logs and stop messages. */
  name: string;
  /** Program and arguments; it reads its spec (HarnessRunSpec, JSON) on stdin. */
  command: string[];
  /** Wall-clock seconds the harness may run in all. */
  timeout_s: number;
  /**
   * Namespaces without capabilities (needs root and util-linux's unshare and setpriv).
   * Default true; false only for tests of the runner itself, never for a run.
   */
  isolate?: boolean;
  /** Harness-specific settings, passed through in the spec. */
  args?: Record<string, unknown>;
}

/** The env's spec with the run's `[[env]].args` overrides: `harness_timeout_s`, and `harness_args` merged into its args. */
export function harnessSpecFor(spec: HarnessSpec, envArgs: Record<string, unknown>): HarnessSpec {
  const t = envArgs.harness_timeout_s;
  const extra = envArgs.harness_args;
  return {
    ...spec,
    ...(typeof t === 'number' && t > 0 ? { timeout_s: t } : {}),
    ...(extra && typeof extra === 'object' ? { args: { ...spec.args, ...(extra as Record<string, unknown>) } } : {}),
  };
}

/** What the harness reads on stdin. */
export interface HarnessRunSpec {
  /** The endpoint's unix socket; the OpenAI base path is /v1. */
  socket: string;
  key: string;
  model: string;
  instruction: string;
  workdir: string;
  limits: AgentLimits;
  max_tokens_per_turn: number;
  exec_timeout_s: number;
  timeout_s: number;
  args: Record<string, unknown>;
}

export interface HarnessRunInput {
  spec: HarnessSpec;
  upstream: string;
  modelName: string;
  policyVersion: number;
  sampling: TurnSampling;
  limits: AgentLimits;
  ctx: ToolContext;
  instruction: string;
  workdir: string;
  signal?: AbortSignal;
  log?: Logger;
  progress?: () => void;
}

/** The line a harness runner prints last: `RATCHET_FINAL {"final": {...}}`. */
export const FINAL_PREFIX = 'RATCHET_FINAL ';
const STDOUT_CAP = 1 << 20;
const STDERR_TAIL = 4000;

export class HarnessInfraError extends Error {
  override readonly name = 'HarnessInfraError';
}

/**
 * Unprivileged ids harnesses run as: one per rollout, drawn at random from a range no host account
 * uses, so one harness can neither open another's socket directory nor read root's files.
 */
export const HARNESS_UID_BASE = 2_000_000;
const HARNESS_UID_SPAN = 1_000_000;
export const harnessUid = (): number => HARNESS_UID_BASE + randomInt(HARNESS_UID_SPAN);

/**
 * The argv that runs `command` isolated: fresh network, pid, ipc, uts and mount namespaces, loopback
 * up, then as `uid` (a user of its own, no groups) with every capability dropped and no_new_privs.
 */
export function isolatedArgv(command: string[], uid: number): string[] {
  return ['unshare', '--net', '--pid', '--fork', '--mount-proc', '--ipc', '--uts', '--kill-child', '--',
    'sh', '-c', `ip link set lo up && exec setpriv --reuid=${uid} --regid=${uid} --clear-groups --no-new-privs --bounding-set=-all --inh-caps=-all -- "$@"`, 'sh', ...command];
}

/** The final answer a runner printed, or undefined. */
export function parseFinal(stdout: string): Record<string, unknown> | undefined {
  const lines = stdout.split('\n');
  for (let i = lines.length - 1; i >= 0; i--) {
    const l = lines[i]!;
    if (!l.startsWith(FINAL_PREFIX)) continue;
    try {
      const v = JSON.parse(l.slice(FINAL_PREFIX.length)) as { final?: unknown };
      if (v.final && typeof v.final === 'object' && !Array.isArray(v.final)) return v.final as Record<string, unknown>;
    } catch {
      return undefined;
    }
    return undefined;
  }
  return undefined;
}

export async function runHarness(input: HarnessRunInput): Promise<AgentResult & { tools: ToolSpec[] }> {
  const { spec, log } = input;
  input.signal?.throwIfAborted();
  const isolate = spec.isolate !== false;
  const uid = isolate ? harnessUid() : undefined;
  const dir = await fs.mkdtemp(path.join(os.tmpdir(), 'ratchet-harness-'));
  await fs.chmod(dir, 0o700);
  const home = path.join(dir, 'home');
  await fs.mkdir(home);
  const cmds: CommandLog = { commands: [], execErrors: 0, toolsMs: 0 };
  const ep = await startEndpoint({
    upstream: input.upstream,
    modelName: input.modelName,
    policyVersion: input.policyVersion,
    sampling: input.sampling,
    limits: input.limits,
    socketPath: path.join(dir, 'endpoint.sock'),
    ...(input.progress ? { onTurn: input.progress } : {}),
    routes: bridgeRoutes({ sandbox: input.ctx.sandbox, execTimeoutMs: input.ctx.execTimeoutMs, workdir: input.workdir, progress: input.progress }, cmds),
    ...(log ? { log } : {}),
  });
  try {
    // Only this rollout's harness user may enter the directory and connect to its socket.
    if (uid !== undefined) for (const p of [dir, home, ep.socketPath!]) await fs.chown(p, uid, uid);
    const runSpec: HarnessRunSpec = {
      socket: ep.socketPath!, key: ep.key, model: input.modelName, instruction: input.instruction, workdir: input.workdir,
      limits: input.limits, max_tokens_per_turn: input.sampling.max_tokens, exec_timeout_s: input.ctx.execTimeoutMs / 1000,
      timeout_s: spec.timeout_s, args: spec.args ?? {},
    };
    const argv = uid === undefined ? spec.command : isolatedArgv(spec.command, uid);
    const child = spawn(argv[0]!, argv.slice(1), {
      detached: true,
      stdio: ['pipe', 'pipe', 'pipe'],
      cwd: home,
      // None of the worker's variables: only what a Python harness needs to start quietly and offline.
      env: {
        PATH: '/usr/local/bin:/usr/bin:/bin', HOME: home, PYTHONUNBUFFERED: '1', MSWEA_SILENT_STARTUP: '1',
        MSWEA_GLOBAL_CONFIG_DIR: home, MSWEA_COST_TRACKING: 'ignore_errors', LITELLM_LOCAL_MODEL_COST_MAP: 'True', LITELLM_TELEMETRY: 'False',
        HF_HUB_OFFLINE: '1', NO_PROXY: '*',
      },
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d: Buffer) => { if (stdout.length < STDOUT_CAP) stdout += d.toString('utf8'); });
    child.stderr.on('data', (d: Buffer) => { stderr = (stderr + d.toString('utf8')).slice(-STDERR_TAIL); });
    child.stdin.on('error', () => { /* the harness died before reading its spec: its exit says why */ });
    child.stdin.end(JSON.stringify(runSpec));
    const exited = new Promise<{ code: number | null; sig: NodeJS.Signals | null; spawnError?: Error }>((resolve) => {
      child.once('error', (err) => resolve({ code: null, sig: null, spawnError: err }));
      child.once('close', (code, sig) => resolve({ code, sig }));
    });
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<'timeout'>((r) => { timer = setTimeout(() => r('timeout'), spec.timeout_s * 1000); });
    const aborted = new Promise<'abort'>((r) => input.signal?.addEventListener('abort', () => r('abort'), { once: true }));
    const first = await Promise.race([exited.then((e) => ({ kind: 'exit' as const, e })), ep.stopped.then((s) => ({ kind: 'stop' as const, s })),
      timedOut.then(() => ({ kind: 'timeout' as const })), aborted.then(() => ({ kind: 'abort' as const }))]);
    clearTimeout(timer);
    if (first.kind !== 'exit') {
      try { process.kill(-child.pid!, 'SIGKILL'); } catch { /* already gone */ }
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5000))]);
    }
    if (first.kind === 'abort') throw input.signal?.reason instanceof Error ? input.signal.reason : new Error('the rollout was cancelled');
    const stop: EndpointStop | undefined = first.kind === 'stop' ? first.s : ep.stopInfo();
    if (stop?.infra) throw new HarnessInfraError(stop.message);
    let reason: StopReason;
    let error: string | undefined;
    let answer: Record<string, unknown> | undefined;
    const tail = stderr.trim().split('\n').slice(-8).join(' / ');
    if (stop) {
      reason = stop.reason;
      if (reason === 'error') error = `harness ${spec.name}: ${stop.message}`;
    } else if (first.kind === 'timeout') {
      reason = 'error';
      error = `harness ${spec.name} ran past its ${spec.timeout_s}s time limit and was killed`;
    } else {
      const e = first.kind === 'exit' ? first.e : { code: null, sig: null };
      answer = parseFinal(stdout);
      if (e.spawnError) throw new HarnessInfraError(`harness ${spec.name} could not be started (${argv[0]}): ${e.spawnError.message}`);
      // The isolation itself failing (not root, no user namespaces) is this host's problem, not the harness's.
      if (e.code !== 0 && isolate && /^(unshare|setpriv|ip): /m.test(stderr)) {
        throw new HarnessInfraError(`harness ${spec.name} could not be isolated on this host: ${tail}. Fix: run the rollout worker as root with util-linux and iproute2`);
      }
      if (e.code !== 0) {
        reason = 'error';
        error = `harness ${spec.name} crashed (exit ${e.code ?? e.sig ?? 'unknown'})${tail ? `: ${tail}` : ''}`;
        answer = undefined;
      } else if (!answer) {
        reason = 'error';
        error = `harness ${spec.name} exited without a final answer (no ${FINAL_PREFIX.trim()} line)${tail ? `: ${tail}` : ''}`;
      } else {
        reason = 'completed';
      }
    }
    log?.info({ harness: spec.name, stop: reason, turns: ep.turns.length, commands: cmds.commands.length, ...(error ? { error } : {}) }, 'harness episode ended');
    return assembleResult(ep.turns, ep.tools(), cmds, reason, error, answer);
  } finally {
    await ep.close();
    await fs.rm(dir, { recursive: true, force: true });
  }
}
