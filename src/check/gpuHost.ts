import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { promisify } from 'node:util';
import type { RunConfig } from '../config/schema';
import type { StackLayout } from '../layout';
import { estimateTrainerMemory, modelShape } from './gpu';
import { fail, ok, warn, type CheckLine } from './types';

/**
 * The GPU host a layout (src/layout) is about to run on, as nvidia-smi sees it: the driver and CUDA
 * versions, each GPU's free memory against what the layout puts there (vLLM's share, the trainer's
 * estimate), vLLM's CUDA build in its venv, and the peer-to-peer path NCCL takes between the trainer's
 * GPUs. `ratchet check` (not --offline) and `ratchet doctor` print these lines.
 */

const run = promisify(execFile);

export interface GpuInfo {
  index: number;
  name: string;
  totalMiB: number;
  freeMiB: number;
}

export interface GpuHost {
  driver: string;
  cuda: string;
  gpus: GpuInfo[];
  /** Peer-to-peer status between two GPUs ("OK", "NS", "CNS", ...), from `nvidia-smi topo -p2p n`. */
  p2p: (a: number, b: number) => string | undefined;
}

/** `nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version --format=csv,noheader,nounits`. */
export function parseGpuQuery(csv: string): { gpus: GpuInfo[]; driver: string } {
  const rows = csv.trim().split('\n').filter((l) => l.trim()).map((l) => l.split(',').map((s) => s.trim()));
  const gpus = rows.map((r) => ({ index: Number(r[0]), name: r[1] ?? '?', totalMiB: Number(r[2]), freeMiB: Number(r[3]) }));
  if (gpus.some((g) => !Number.isInteger(g.index) || !Number.isFinite(g.totalMiB) || !Number.isFinite(g.freeMiB))) {
    throw new Error(`cannot read nvidia-smi's GPU list: ${JSON.stringify(csv.slice(0, 200))}`);
  }
  return { gpus, driver: rows[0]?.[4] ?? '?' };
}

/** The matrix of `nvidia-smi topo -p2p n` (rows and columns GPU0..GPUn, "X" on the diagonal). */
export function parseP2p(text: string): (a: number, b: number) => string | undefined {
  const m = new Map<string, string>();
  const lines = text.split('\n').filter((l) => /^\s*GPU\d+/.test(l));
  for (const line of lines) {
    const [head, ...cells] = line.trim().split(/\s+/);
    const a = Number(head!.slice(3));
    cells.forEach((cell, b) => m.set(`${a},${b}`, cell));
  }
  return (a, b) => m.get(`${a},${b}`);
}

/** Asks nvidia-smi (the one on PATH). Throws with the reason when there is none or it fails. */
export async function queryGpuHost(): Promise<GpuHost> {
  const q = await run('nvidia-smi', ['--query-gpu=index,name,memory.total,memory.free,driver_version', '--format=csv,noheader,nounits'], { timeout: 30_000, env: process.env });
  const { gpus, driver } = parseGpuQuery(q.stdout);
  const header = await run('nvidia-smi', [], { timeout: 30_000, env: process.env });
  const cuda = header.stdout.match(/CUDA Version:\s*([\d.]+)/)?.[1] ?? '?';
  let p2p: GpuHost['p2p'] = () => undefined;
  if (gpus.length > 1) {
    try {
      p2p = parseP2p((await run('nvidia-smi', ['topo', '-p2p', 'n'], { timeout: 30_000, env: process.env })).stdout);
    } catch {
      // older drivers lack -p2p: the NCCL line says it could not tell
    }
  }
  return { driver, cuda, gpus, p2p };
}

/** vLLM's CUDA build in its venv: its version and the CUDA its torch was built for. */
export async function vllmCudaBuild(venv: string): Promise<{ ok: true; detail: string } | { ok: false; detail: string }> {
  const python = path.join(venv, 'bin', 'python');
  if (!existsSync(python)) return { ok: false, detail: `no vLLM CUDA build: ${venv} does not exist` };
  try {
    const { stdout } = await run(python, ['-c', 'import importlib.metadata as m, torch; print(m.version("vllm"), torch.__version__, torch.version.cuda)'], { timeout: 180_000, env: process.env });
    const [vllm, torch, cuda] = stdout.trim().split(/\s+/);
    if (!cuda || cuda === 'None') return { ok: false, detail: `vLLM ${vllm} in ${venv} has a torch without CUDA (${torch})` };
    return { ok: true, detail: `vLLM ${vllm} (torch ${torch}, CUDA ${cuda}) in ${venv}` };
  } catch (err) {
    return { ok: false, detail: `vLLM in ${venv} does not import: ${((err as { stderr?: string }).stderr ?? (err as Error).message).trim().split('\n').pop()}` };
  }
}

const gib = (mib: number) => (mib / 1024).toFixed(1);

/**
 * The lines for one layout on this host. `running`: the layout's own processes already run (their memory
 * is then part of what nvidia-smi counts as used, so a shortfall is only a warning).
 */
export function gpuHostLines(c: RunConfig, l: Extract<StackLayout, { kind: 'gpu' }>, host: GpuHost | { error: string },
  vllm: { ok: boolean; detail: string }, venvDir: string, running = false): CheckLine[] {
  const fixSetup = 'Fix: bash infra/main.sh <config> (or bash infra/setup.sh <config>) on this host';
  if ('error' in host) {
    return [fail('gpu', `the config runs on GPUs (trainer.device = "cuda") but nvidia-smi does not answer here: ${host.error.split('\n')[0]}. ` +
      'Fix: run on a host with the NVIDIA driver installed (nvidia-smi on PATH), or check with --offline elsewhere')];
  }
  const lines: CheckLine[] = [ok('gpu', `NVIDIA driver ${host.driver}, CUDA ${host.cuda}, ${host.gpus.length} GPU(s): ` +
    host.gpus.map((g) => `${g.index} ${g.name} (${gib(g.freeMiB)} of ${gib(g.totalMiB)} GiB free)`).join(', '))];
  const byIndex = new Map(host.gpus.map((g) => [g.index, g]));
  const missing = l.gpus.filter((g) => !byIndex.has(g.index)).map((g) => g.index);
  if (missing.length) {
    lines.push(fail('gpu', `the layout uses GPU(s) ${missing.join(', ')} but nvidia-smi lists ${host.gpus.map((g) => g.index).join(', ') || 'none'}. ` +
      'Fix: set trainer.gpu.count / trainer.gpu.devices and inference.gpus to GPUs this host has'));
  }
  const shape = modelShape(c);
  const trainerBytes = shape.shape ? estimateTrainerMemory(c, shape.shape).total : undefined;
  for (const use of l.gpus) {
    const g = byIndex.get(use.index);
    if (!g) continue;
    const vllmMiB = use.vllmUtilization * g.totalMiB;
    const trainerMiB = use.trainer && trainerBytes !== undefined ? trainerBytes / 2 ** 20 : 0;
    const need = vllmMiB + trainerMiB;
    const parts = [
      ...(use.inference.length ? [`${use.inference.join(', ')} ${gib(vllmMiB)} GiB (--gpu-memory-utilization ${use.vllmUtilization} x ${gib(g.totalMiB)})`] : []),
      ...(use.trainer ? [trainerBytes === undefined ? 'the trainer (no estimate: unknown model shape)' : `the trainer's estimate ${gib(trainerMiB)} GiB`] : []),
    ].join(' + ');
    if (need <= g.freeMiB) lines.push(ok('gpu', `GPU ${use.index}: ${parts} = ${gib(need)} GiB fits its ${gib(g.freeMiB)} GiB free`));
    else if (running) lines.push(ok('gpu', `GPU ${use.index}: ${gib(g.freeMiB)} GiB free with the stack running (${parts})`));
    else {
      const msg = `GPU ${use.index}: ${parts} = ${gib(need)} GiB, but only ${gib(g.freeMiB)} GiB of ${gib(g.totalMiB)} are free`;
      lines.push((g.freeMiB < vllmMiB ? fail : warn)('gpu', `${msg}${g.freeMiB < vllmMiB ? ' (vLLM refuses to start below its share)' : ''}. ` +
        'Fix: stop what else holds this GPU (nvidia-smi lists it), lower inference.gpu_memory_utilization or the trainer\'s memory (docs/gpu.md), or use other GPUs (trainer.gpu.devices, inference.gpus)'));
    }
  }
  // A trainer-only host (--only trainer) runs no vLLM: its CUDA build is the inference hosts' to check.
  if (l.inference.length) lines.push(vllm.ok ? ok('gpu', vllm.detail) : fail('gpu', `${vllm.detail}. ${fixSetup}, which installs vLLM's CUDA build into ${venvDir}`));
  const tg = l.trainer.gpus;
  if (tg.length > 1) {
    const pairs: string[] = [];
    const bad: string[] = [];
    for (let i = 0; i < tg.length; i++) {
      for (let j = i + 1; j < tg.length; j++) {
        const s = host.p2p(tg[i]!, tg[j]!);
        pairs.push(`${tg[i]}-${tg[j]} ${s ?? '?'}`);
        if (s !== 'OK') bad.push(`${tg[i]}-${tg[j]} (${s ?? 'not reported'})`);
      }
    }
    if (bad.length === 0) lines.push(ok('gpu', `NCCL between the trainer's GPUs: peer-to-peer on every pair (${pairs.join(', ')})`));
    else {
      lines.push(warn('gpu', `NCCL between the trainer's GPUs: no peer-to-peer between ${bad.join(', ')}; NCCL goes through host memory there (slower gradient sums and FSDP2 gathers). ` +
        'nvidia-smi topo -m shows the links; ratchet doctor runs an all-reduce over them once the stack is up'));
    }
  }
  return lines;
}
