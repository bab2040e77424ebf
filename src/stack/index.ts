import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import { paths, REPO_ROOT } from '../shared/paths';
import { logFile, serviceStatus, ServiceSpec, ServiceStartError, startService, stopService } from './processes';
import type { StackLayout } from '../layout';
import { saveLayout, savedLayout, type GpuLayout, type SavedLayout } from './layoutFile';
import { livenessFileOf, STALE_ENV } from './supervisor';

export { formatDoctor, runDoctor } from './doctor';
export type { CheckResult } from './doctor';
export { ServiceStartError } from './processes';

const run = promisify(execFile);

/**
 * The local stack, in start order. Infrastructure (dockerd, Temporal, inference)
 * starts through its infra/ script, which owns install and health checks; the
 * Ratchet workers start here as background processes.
 */
const INFRA = [
  { name: 'dockerd', script: 'infra/docker.sh', log: 'dockerd' },
  { name: 'temporal', script: 'infra/temporal.sh', log: 'temporal' },
  { name: 'inference', script: 'infra/inference.sh', log: 'vllm' },
] as const;

/**
 * The local rollout worker's slots (RATCHET_ROLLOUT_SLOTS, unless the environment sets it). Here an episode is
 * ~95% waiting on the vLLM beside it, whose one-core CPU decode batches: 8 requests gave 5x the tokens/s of one,
 * ~1.5x that of the 4 the worker's own default keeps (BENCHMARKS.md, "Where an agent-bench step's time goes").
 */
export const LOCAL_ROLLOUT_SLOTS = 8;

/**
 * The workers; on a GPU layout (src/layout, saved by `ratchet up --config`) the trainer is its torchrun job,
 * and a trainer-only host (`--only trainer`) runs that alone.
 */
export function workerSpecs(layout: GpuLayout | undefined = savedLayout()?.layout): ServiceSpec[] {
  const node = process.execPath;
  const dist = path.join(REPO_ROOT, 'dist', 'workers');
  const t = layout?.trainer;
  const torchrun: ServiceSpec | undefined = t && { name: t.name, command: t.command, args: t.args, cwd: t.cwd, env: t.env, minUptimeMs: 15_000, readyTimeoutMs: 300_000 };
  if (layout?.only === 'trainer') return [torchrun!];
  return [
    { name: 'worker-main', command: node, args: [path.join(dist, 'main.js')], cwd: REPO_ROOT, env: { RATCHET_LIVENESS_FILE: livenessFileOf('worker-main') }, minUptimeMs: 4_000, readyTimeoutMs: 60_000 },
    { name: 'worker-rollout', command: node, args: [path.join(dist, 'rollout.js')], cwd: REPO_ROOT, env: { RATCHET_LIVENESS_FILE: livenessFileOf('worker-rollout'), RATCHET_ROLLOUT_SLOTS: process.env.RATCHET_ROLLOUT_SLOTS ?? String(LOCAL_ROLLOUT_SLOTS) }, minUptimeMs: 4_000, readyTimeoutMs: 60_000 },
    // torchrun starts a process per GPU, each importing torch and initialising CUDA and NCCL: more time than one CPU process.
    torchrun ?? {
      name: 'worker-trainer',
      command: path.join(paths.venv('trainer'), 'bin', 'python'),
      args: ['-m', 'ratchet_trainer.worker'],
      cwd: path.join(REPO_ROOT, 'trainer'),
      env: { PYTHONUNBUFFERED: '1', RATCHET_LIVENESS_FILE: livenessFileOf('worker-trainer') },
      minUptimeMs: 8_000,
      readyTimeoutMs: 120_000,
    },
  ];
}

/** vLLM's health endpoint answers (the server is up and its engine ready). */
export async function vllmHealthy(replica: { host: string; port: number }): Promise<boolean> {
  try {
    return (await fetch(`http://${replica.host === '0.0.0.0' ? '127.0.0.1' : replica.host}:${replica.port}/health`, { signal: AbortSignal.timeout(10_000) })).ok;
  } catch {
    return false;
  }
}

/** One vLLM replica per GPU group of a GPU layout, each on its GPUs (CUDA_VISIBLE_DEVICES) with the config's flags. */
export function inferenceSpecs(layout: GpuLayout | undefined = savedLayout()?.layout): ServiceSpec[] {
  return (layout?.inference ?? []).map((r) => ({
    name: r.name, command: r.command, args: r.args, cwd: r.cwd, env: r.env, port: r.port,
    // Loading a 4-14B model and profiling its KV cache takes minutes; the CPU stack's variable sets it too.
    readyTimeoutMs: Number(process.env.RATCHET_VLLM_START_TIMEOUT ?? 900) * 1000,
    ready: () => vllmHealthy(r),
  }));
}

/** What a GPU layout needs on disk before anything starts, each with the set-up that makes it. */
function gpuPrerequisites(saved: SavedLayout): string[] {
  const l = saved.layout;
  const setup = `bash infra/setup.sh ${saved.configPath}   (or bash infra/main.sh ${saved.configPath})`;
  const missing: string[] = [];
  if (l.inference.length && !existsSync(l.inference[0]!.command)) missing.push(`vLLM's CUDA build (${l.inference[0]?.command}). Fix: ${setup}`);
  if (!existsSync(l.trainer.command)) missing.push(`torchrun in the trainer venv (${l.trainer.command}). Fix: bash infra/trainer-env.sh`);
  if (!existsSync(path.join(l.model.path, 'config.json'))) {
    missing.push(`the model at ${l.model.path}. Fix: ${l.model.hub ? setup : `put the Hugging Face model directory (config.json, weights, tokenizer) there, or set model.hub and run ${setup}`}`);
  }
  return missing;
}

/** Replaces a worker that died or whose liveness went stale (src/stack/supervisor.ts); started after the workers. */
export function supervisorSpec(): ServiceSpec {
  return {
    name: 'supervisor',
    command: process.execPath,
    args: [path.join(REPO_ROOT, 'dist', 'stack', 'supervise.js')],
    cwd: REPO_ROOT,
    env: process.env[STALE_ENV] ? { [STALE_ENV]: process.env[STALE_ENV] } : {},
    minUptimeMs: 2_000,
    readyTimeoutMs: 20_000,
  };
}

export interface UpEvent {
  component: string;
  state: 'started' | 'already-running' | 'stopped' | 'not-running';
  log: string;
}

async function infraScript(script: string, verb: string, log: string): Promise<void> {
  try {
    await run('bash', [path.join(REPO_ROOT, script), verb], { cwd: REPO_ROOT, timeout: 15 * 60_000 });
  } catch (err) {
    const stderr = ((err as { stderr?: string }).stderr ?? '').trim();
    throw new ServiceStartError(`${script} ${verb} failed:\n${stderr || (err as Error).message}\nLog: ${logFile(log)}`, logFile(log));
  }
}

/**
 * Starts everything in the background. Running twice is harmless. With `config` (ratchet up --config) the
 * stack is that config's layout (src/layout), saved for the later commands; without, the layout saved last,
 * else the CPU stack.
 */
export async function stackUp(onEvent: (e: UpEvent) => void = () => {}, config?: { path: string; layout: StackLayout }): Promise<UpEvent[]> {
  const events: UpEvent[] = [];
  const emit = (e: UpEvent) => { events.push(e); onEvent(e); };
  const saved: SavedLayout | undefined = config
    ? (config.layout.kind === 'gpu' ? { configPath: config.path, layout: config.layout } : undefined)
    : savedLayout();
  if (saved) {
    // Checked before the layout is kept: a host that cannot start it keeps the stack it had.
    const missing = gpuPrerequisites(saved);
    if (missing.length) throw new ServiceStartError(`the GPU layout of ${saved.configPath} cannot start; missing:\n  ${missing.join('\n  ')}`, logFile('vllm-0'));
  }
  if (config) saveLayout(config.path, config.layout);
  const workers = workerSpecs(saved?.layout);
  for (const spec of workers) {
    if (!existsSync(spec.args[0]!) && spec.command === process.execPath) {
      throw new ServiceStartError(`${spec.name}: ${spec.args[0]} is missing. Fix: npm run build`, logFile(spec.name));
    }
  }
  const startInfra = async (svc: (typeof INFRA)[number]) => {
    await infraScript(svc.script, 'start', svc.log);
    emit({ component: svc.name, state: 'started', log: logFile(svc.log) });
  };
  // A trainer-only host: Temporal, dockerd, vLLM and the TS workers run on other hosts.
  const infra = saved?.layout.only === 'trainer' ? [] : INFRA;
  // The CPU stack's vLLM starts beside the workers, which need only dockerd and Temporal: its start is the
  // longest (35-70 s on the 2-core machine). A GPU layout's replicas start first, each alone: vLLM sizes its KV
  // cache from the GPU memory free while it profiles, which a trainer loading beside it would take.
  let inferenceBeside: Promise<void> = Promise.resolve();
  for (const svc of infra) {
    if (svc.name !== 'inference') await startInfra(svc);
    else if (!saved) inferenceBeside = startInfra(svc);
    else for (const spec of inferenceSpecs(saved.layout)) emit({ component: spec.name, state: await startService(spec), log: logFile(spec.name) });
  }
  // At once: none needs another, and each start waits out its minimum uptime (8 s together, 16 s in turn).
  const started = await Promise.allSettled([inferenceBeside, ...workers.map(async (spec) => {
    emit({ component: spec.name, state: await startService(spec), log: logFile(spec.name) });
  })]);
  const failed = started.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
  const sup = supervisorSpec();
  emit({ component: sup.name, state: await startService(sup), log: logFile(sup.name) });
  return events;
}

/** Stops the workers, inference and Temporal (its SQLite file stays). dockerd keeps running. */
export async function stackDown(onEvent: (e: UpEvent) => void = () => {}): Promise<UpEvent[]> {
  const events: UpEvent[] = [];
  // The supervisor first: it would otherwise restart the workers as they stop.
  for (const spec of [supervisorSpec(), ...[...workerSpecs()].reverse()]) {
    const state = await stopService(spec.name);
    const e = { component: spec.name, state, log: logFile(spec.name) };
    events.push(e); onEvent(e);
  }
  for (const spec of [...inferenceSpecs()].reverse()) {
    const e: UpEvent = { component: spec.name, state: await stopService(spec.name, 30_000), log: logFile(spec.name) };
    events.push(e); onEvent(e);
  }
  for (const svc of savedLayout()?.layout.only === 'trainer' ? [] : [...INFRA].reverse()) {
    if (svc.name === 'dockerd') continue; // other tenants may use it; leaving it up costs nothing
    await infraScript(svc.script, 'stop', svc.log);
    const e: UpEvent = { component: svc.name, state: 'stopped', log: logFile(svc.log) };
    events.push(e); onEvent(e);
  }
  return events;
}

export function workerStatus(): { name: string; running: boolean; pid?: number; log: string }[] {
  return [...inferenceSpecs(), ...workerSpecs(), supervisorSpec()].map((s) => ({ name: s.name, ...serviceStatus(s.name) }));
}
