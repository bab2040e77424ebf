import * as path from 'node:path';
import type { RunConfig } from '../config/schema';

/**
 * What `ratchet up --config <config>` starts on this host, as one pure function of the run config:
 * the processes, the GPUs each gets, their command lines and environment. The CLI (`ratchet up`,
 * `ratchet down`, the supervisor, `ratchet doctor`, `ratchet check`) and the set-up scripts
 * (`ratchet layout <config> --format env`, read by infra/setup.sh and infra/main.sh) all take it from
 * here, so what is started, supervised, checked and tested is one thing (docs/gpu.md).
 *
 * A config whose trainer runs on the CPU (trainer.device "cpu" or "auto") gets the CPU layout: the
 * stack `ratchet up` has always started (infra/inference.sh's vLLM CPU build, SmolLM2, the trainer
 * as one process); only trainer.device = "cuda" makes a GPU layout.
 */

/** vLLM's --max-lora-rank accepts these only (vllm/config/lora.py, MaxLoRARanks). */
export const VLLM_LORA_RANKS = [1, 8, 16, 32, 64, 128, 256, 320, 512] as const;
/** The venv of vLLM's CUDA build (infra/inference-gpu.sh); the CPU build keeps `vllm`. */
export const VLLM_CUDA_VENV = 'vllm-cuda';
/** infra/vllm/ratchet_weights.py's hooks, which full fine-tuning's weight sync needs in every vLLM worker and API server. */
export const FULL_WEIGHTS_WORKER = 'ratchet_weights.WeightsWorker';
export const FULL_WEIGHTS_MIDDLEWARE = 'ratchet_weights.WeightsRoute';
/** vLLM's share of a GPU it does not share with the trainer. */
export const VLLM_OWN_GPU_UTILIZATION = 0.9;
/** The trainer's local stack process name, the CPU stack's too (src/stack/index.ts). */
export const TRAINER_PROCESS = 'worker-trainer';

export interface LayoutPaths {
  /** The repository root (the trainer package is under trainer/). */
  root: string;
  /** The state dir, $RATCHET_HOME: venvs, models, logs, run files. */
  home: string;
}

export interface LayoutProcess {
  /** Its pid file is <home>/run/<name>.pid, its log <home>/logs/<name>.log. */
  name: string;
  command: string;
  args: string[];
  cwd: string;
  /** What the layout sets; the process inherits the rest of the environment. */
  env: Record<string, string>;
  gpus: number[];
}

export interface InferenceReplica extends LayoutProcess {
  host: string;
  port: number;
  baseUrl: string;
  /** --gpu-memory-utilization: vLLM's share of each of its GPUs. */
  gpuMemoryUtilization: number;
  tensorParallel: number;
}

export interface TrainerProcess extends LayoutProcess {
  /** torchrun --nproc-per-node: one rank per GPU. */
  ranks: number;
  /** Some of its GPUs also hold a vLLM replica. */
  sharesGpu: boolean;
}

/** One GPU and what runs on it, for the checks against nvidia-smi. */
export interface GpuUse {
  index: number;
  /** A trainer rank runs here (the memory estimate applies). */
  trainer: boolean;
  /** vLLM replicas here, by process name. */
  inference: string[];
  /** The share of the GPU vLLM takes (0 when none runs here). */
  vllmUtilization: number;
}

/**
 * The parts of a layout a host runs: all of it, or (a GPU host that trains while vLLM serves from other hosts)
 * the trainer alone: `ratchet up --config <config> --only trainer`.
 */
export const LAYOUT_PARTS = ['trainer'] as const;
export type LayoutPart = (typeof LAYOUT_PARTS)[number];

export type StackLayout =
  | { kind: 'cpu' }
  | {
    kind: 'gpu';
    /** Set: this host runs that part alone (no vLLM, Temporal, dockerd or TS workers here). */
    only?: LayoutPart;
    model: { path: string; hub?: string; servedName: string };
    /** The venv vLLM's CUDA build lives in ($RATCHET_HOME/venvs/<name>). */
    vllmVenv: string;
    inference: InferenceReplica[];
    trainer: TrainerProcess;
    gpus: GpuUse[];
  };

export class LayoutError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'LayoutError';
  }
}

/** The smallest rank vLLM accepts that holds a LoRA of this rank. */
export function vllmLoraRank(rank: number): number {
  const r = VLLM_LORA_RANKS.find((x) => x >= rank);
  if (r === undefined) {
    throw new LayoutError(`trainer.lora.rank = ${rank}: vLLM serves LoRA ranks up to ${VLLM_LORA_RANKS.at(-1)}. Fix: set trainer.lora.rank to ${VLLM_LORA_RANKS.at(-1)} or less`);
  }
  return r;
}

/** A path from a run config, absolute: `.ratchet/...` is the state dir, other relative paths the repository's. */
function resolveIn(p: string, paths: LayoutPaths): string {
  if (path.isAbsolute(p)) return p;
  const norm = path.normalize(p);
  if (norm === '.ratchet' || norm.startsWith(`.ratchet${path.sep}`)) return path.join(paths.home, norm.slice('.ratchet'.length));
  return path.join(paths.root, p);
}

const LOCAL_HOSTS = new Set(['127.0.0.1', 'localhost', '0.0.0.0', '[::1]', '::1']);

function localEndpoint(url: string, i: number): { host: string; port: number } {
  const u = new URL(url);
  if (!LOCAL_HOSTS.has(u.hostname)) {
    throw new LayoutError(`inference.base_urls[${i}] = "${url}" is on another host; ratchet up starts vLLM on this one only. ` +
      'Fix: use http://127.0.0.1:<port>/v1 for each replica this host serves, or start that host\'s vLLM there (infra/cluster/README.md)');
  }
  const port = Number(u.port || (u.protocol === 'https:' ? 443 : 80));
  return { host: u.hostname === 'localhost' ? '127.0.0.1' : u.hostname.replace(/^\[|\]$/g, ''), port };
}

/** vLLM's GPU groups: inference.gpus, else the trainer's GPUs split over the replicas (shared) or the GPUs after them. */
function inferenceGroups(c: RunConfig, trainerGpus: number[]): number[][] {
  const n = c.inference.base_urls.length;
  if (c.inference.gpus) {
    if (c.inference.gpus.length !== n) {
      throw new LayoutError(`inference.gpus names ${c.inference.gpus.length} GPU group(s) but inference.base_urls has ${n} replica(s). ` +
        'Fix: give one group per base_urls entry, e.g. gpus = [[0], [1]] for two replicas of one GPU each');
    }
    return c.inference.gpus.map((g) => [...g]);
  }
  if (c.inference.gpu_memory_utilization !== undefined) {
    if (trainerGpus.length % n !== 0) {
      throw new LayoutError(`vLLM shares the trainer's ${trainerGpus.length} GPU(s) (inference.gpu_memory_utilization is set) but ${n} replicas do not split them evenly. ` +
        'Fix: list the replicas\' GPUs in inference.gpus, or use as many base_urls as trainer GPUs (or a divisor of them)');
    }
    const size = trainerGpus.length / n;
    return Array.from({ length: n }, (_, i) => trainerGpus.slice(i * size, (i + 1) * size));
  }
  const next = Math.max(...trainerGpus) + 1;
  return Array.from({ length: n }, (_, i) => [next + i]);
}

/**
 * The stack a config describes on this host; with `only`, the part of it this host runs (the config's
 * inference.base_urls may then name other hosts: their vLLM is started there). Pure: reads no file, asks no GPU.
 */
export function stackLayout(c: RunConfig, paths: LayoutPaths, opts: { only?: LayoutPart } = {}): StackLayout {
  if (c.trainer.device !== 'cuda') {
    if (opts.only) {
      throw new LayoutError(`--only ${opts.only}: trainer.device = "${c.trainer.device}" makes the CPU layout, which starts the whole CPU stack on one host. ` +
        'Fix: set trainer.device = "cuda" for a GPU host that trains alone, or run ratchet up --config without --only');
    }
    return { kind: 'cpu' };
  }
  const t = c.trainer;
  const trainerGpus = t.gpu.devices ? [...t.gpu.devices] : Array.from({ length: t.gpu.count }, (_, i) => i);
  if (trainerGpus.length !== t.gpu.count) {
    throw new LayoutError(`trainer.gpu.devices lists ${trainerGpus.length} GPU(s) but trainer.gpu.count = ${t.gpu.count}. Fix: list exactly count GPUs, or drop devices (0 .. count-1)`);
  }
  if (new Set(trainerGpus).size !== trainerGpus.length) {
    throw new LayoutError(`trainer.gpu.devices = [${trainerGpus.join(', ')}] names a GPU twice. Fix: one rank per GPU, each GPU once`);
  }
  // The trainer alone: vLLM runs elsewhere, so none of its GPU groups, ports or shares is this host's.
  const groups = opts.only === 'trainer' ? [] : inferenceGroups(c, trainerGpus);
  const util = c.inference.gpu_memory_utilization;
  const shared = groups.flat().filter((g) => trainerGpus.includes(g));
  if (shared.length > 0 && util === undefined) {
    throw new LayoutError(`vLLM would run on the trainer's GPU(s) ${[...new Set(shared)].join(', ')} without a share of its own. ` +
      'Fix: set inference.gpu_memory_utilization (e.g. 0.5; ratchet check fits the trainer into the rest), or give vLLM other GPUs in inference.gpus');
  }
  const seenGpus = new Map<number, string>();
  const modelPath = resolveIn(c.model.path, paths);
  const lora = t.mode === 'lora';
  const vllmPython = path.join(paths.home, 'venvs', VLLM_CUDA_VENV, 'bin', 'python');
  const ports = new Set<number>();
  const inference: InferenceReplica[] = groups.map((gpus, i) => {
    const name = `vllm-${i}`;
    for (const g of gpus) {
      const other = seenGpus.get(g);
      if (other) throw new LayoutError(`inference.gpus: GPU ${g} is in the groups of ${other} and ${name}. Fix: one replica per GPU group, each GPU in one group`);
      seenGpus.set(g, name);
    }
    const baseUrl = c.inference.base_urls[i]!;
    const { host, port } = localEndpoint(baseUrl, i);
    if (ports.has(port)) throw new LayoutError(`inference.base_urls[${i}] = "${baseUrl}": port ${port} is another replica's. Fix: one port per replica, e.g. 8000, 8001, ...`);
    ports.add(port);
    const sharesTrainer = gpus.some((g) => trainerGpus.includes(g));
    const gpuMemoryUtilization = util ?? VLLM_OWN_GPU_UTILIZATION;
    const args = [
      '-m', 'vllm.entrypoints.openai.api_server',
      '--model', modelPath, '--served-model-name', c.inference.served_model,
      '--host', host, '--port', String(port),
      '--dtype', 'bfloat16',
      '--gpu-memory-utilization', String(gpuMemoryUtilization),
      '--max-model-len', String(c.orchestrator.seq_len),
      // The distribution sampled from (after temperature, top-k/top-p): the trainer's importance ratio needs it (docs/training.md).
      '--logprobs-mode', 'processed_logprobs',
      // The model's generation_config.json never sets sampling defaults: requests carry the run's own.
      '--generation-config', 'vllm',
      '--enable-auto-tool-choice', '--tool-call-parser', 'hermes',
      ...(lora ? ['--enable-lora', '--max-loras', String(Math.max(4, c.orchestrator.async_level + 2)), '--max-lora-rank', String(vllmLoraRank(t.lora.rank))] : []),
      // Full fine-tuning: each sync reloads the weights in place through one route of Ratchet's (docs/gpu.md, "Full fine-tuning").
      ...(lora ? [] : ['--worker-extension-cls', FULL_WEIGHTS_WORKER, '--middleware', FULL_WEIGHTS_MIDDLEWARE]),
      ...(gpus.length > 1 ? ['--tensor-parallel-size', String(gpus.length)] : []),
      // Beside the trainer, CUDA graphs' capture spikes would eat into the trainer's share (docs/gpu.md).
      ...(sharesTrainer ? ['--enforce-eager'] : []),
    ];
    return {
      name, command: vllmPython, args, cwd: paths.root, gpus, host, port, baseUrl, gpuMemoryUtilization, tensorParallel: gpus.length,
      env: {
        CUDA_VISIBLE_DEVICES: gpus.join(','),
        ...(lora ? { VLLM_ALLOW_RUNTIME_LORA_UPDATING: 'True' } : { PYTHONPATH: path.join(paths.root, 'infra', 'vllm') }),
        HF_HUB_OFFLINE: '1',
      },
    };
  });
  const sharesGpu = trainerGpus.some((g) => seenGpus.has(g));
  const trainerVenv = path.join(paths.home, 'venvs', 'trainer');
  const trainer: TrainerProcess = {
    name: TRAINER_PROCESS,
    command: path.join(trainerVenv, 'bin', 'torchrun'),
    // --standalone: a rendezvous on a free local port; --max-restarts 0: a rank that fails ends the job, and the
    // supervisor (or systemd, Kubernetes) starts it again, whose workflow retry reloads the last checkpoint (docs/gpu.md).
    args: ['--standalone', '--nproc-per-node', String(trainerGpus.length), '--max-restarts', '0', '-m', 'ratchet_trainer.worker'],
    cwd: path.join(paths.root, 'trainer'),
    gpus: trainerGpus,
    ranks: trainerGpus.length,
    sharesGpu,
    env: {
      CUDA_VISIBLE_DEVICES: trainerGpus.join(','),
      PYTHONUNBUFFERED: '1',
      HF_HUB_OFFLINE: '1',
      // The supervisor's liveness file, as on the CPU stack (src/stack/supervisor.ts livenessFileOf).
      RATCHET_LIVENESS_FILE: path.join(paths.home, 'run', `${TRAINER_PROCESS}.alive`),
      // Beside vLLM, which holds its memory fixed, the allocator must be able to give fragments back.
      ...(sharesGpu ? { PYTORCH_CUDA_ALLOC_CONF: 'expandable_segments:True' } : {}),
    },
  };
  const all = [...new Set([...trainerGpus, ...seenGpus.keys()])].sort((a, b) => a - b);
  const gpus: GpuUse[] = all.map((index) => {
    const on = inference.filter((r) => r.gpus.includes(index));
    return { index, trainer: trainerGpus.includes(index), inference: on.map((r) => r.name), vllmUtilization: on.length ? on[0]!.gpuMemoryUtilization : 0 };
  });
  return {
    kind: 'gpu',
    ...(opts.only ? { only: opts.only } : {}),
    model: { path: modelPath, ...(c.model.hub ? { hub: c.model.hub } : {}), servedName: c.inference.served_model },
    vllmVenv: VLLM_CUDA_VENV,
    inference,
    trainer,
    gpus,
  };
}

/** POSIX shell quoting: the value as one word. */
export function shellQuote(s: string): string {
  return /^[A-Za-z0-9_@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`;
}

/** One process as a shell command line: its environment, then the command (run from its cwd). */
export function commandLine(p: LayoutProcess, extraEnv: Record<string, string> = {}): string {
  const env = Object.entries({ ...p.env, ...extraEnv }).map(([k, v]) => `${k}=${shellQuote(v)}`);
  return [...env, shellQuote(p.command), ...p.args.map(shellQuote)].join(' ');
}

/**
 * `ratchet layout --format env`: KEY=value lines a shell script evals (each value quoted). The set-up reads
 * the kind, the model and the vLLM venv; the command lines are there for a host without Node (a
 * Python-only GPU host runs RATCHET_LAYOUT_TRAINER_COMMAND from the trainer directory).
 */
export function layoutEnv(l: StackLayout): string {
  const kv: [string, string][] = [['RATCHET_LAYOUT_KIND', l.kind]];
  if (l.kind === 'gpu') {
    kv.push(
      ['RATCHET_LAYOUT_ONLY', l.only ?? ''],
      ['RATCHET_LAYOUT_MODEL_PATH', l.model.path],
      ['RATCHET_LAYOUT_MODEL_HUB', l.model.hub ?? ''],
      ['RATCHET_LAYOUT_VLLM_VENV', l.vllmVenv],
      ['RATCHET_LAYOUT_LORA', l.inference.some((r) => r.args.includes('--enable-lora')) ? '1' : '0'],
      ['RATCHET_LAYOUT_GPUS', l.gpus.map((g) => g.index).join(',')],
      ['RATCHET_LAYOUT_TRAINER_GPUS', l.trainer.gpus.join(',')],
      ['RATCHET_LAYOUT_TRAINER_CWD', l.trainer.cwd],
      ['RATCHET_LAYOUT_TRAINER_COMMAND', commandLine(l.trainer)],
      ['RATCHET_LAYOUT_INFERENCE_COUNT', String(l.inference.length)],
      ...l.inference.flatMap((r, i): [string, string][] => [
        [`RATCHET_LAYOUT_INFERENCE_${i}_NAME`, r.name],
        [`RATCHET_LAYOUT_INFERENCE_${i}_URL`, r.baseUrl],
        [`RATCHET_LAYOUT_INFERENCE_${i}_COMMAND`, commandLine(r)],
      ]),
    );
  }
  return kv.map(([k, v]) => `${k}=${shellQuote(v)}`).join('\n');
}
