import { existsSync, readFileSync } from 'node:fs';
import * as path from 'node:path';
import type { RunConfig } from '../config/schema';
import { fail, ok, warn, type CheckLine } from './types';

/**
 * The trainer's peak GPU memory, estimated from the model's shape and the run config, and
 * whether it fits the GPU next to vLLM (`inference.gpu_memory_utilization`). Pure arithmetic:
 * the parts are written out so that a test can check them against a hand computation,
 * and docs/gpu.md says where each comes from and how it was measured.
 */

export interface ModelShape {
  vocab: number;
  hidden: number;
  intermediate: number;
  layers: number;
  heads: number;
  kvHeads: number;
  headDim: number;
  tied: boolean;
}

/** Architectures the seed configs name, for when the model directory is not on this machine. */
export const KNOWN_SHAPES: Record<string, ModelShape> = {
  'Qwen3-4B': { vocab: 151_936, hidden: 2560, intermediate: 9728, layers: 36, heads: 32, kvHeads: 8, headDim: 128, tied: true },
  'Qwen3-8B': { vocab: 151_936, hidden: 4096, intermediate: 12_288, layers: 36, heads: 32, kvHeads: 8, headDim: 128, tied: false },
  'Qwen3-14B': { vocab: 151_936, hidden: 5120, intermediate: 17_408, layers: 40, heads: 40, kvHeads: 8, headDim: 128, tied: false },
  'SmolLM2-135M-Instruct': { vocab: 49_152, hidden: 576, intermediate: 1536, layers: 30, heads: 9, kvHeads: 3, headDim: 64, tied: true },
};

export const GiB = 2 ** 30;
/** Logprobs are computed this many tokens at a time (trainer_config.logprob_chunk_tokens, its default). */
export const LOGPROB_CHUNK_TOKENS = 1024;
/** Outside PyTorch's allocator: CUDA context, cuBLAS/NCCL workspaces (one process). */
export const CONTEXT_BYTES = 1 * GiB;
/** Allocator fragmentation: reserved over allocated (measured 4-13% on an H100, BENCHMARKS.md). */
export const FRAGMENTATION = 0.1;

/** A decoder-only transformer of the Llama/Qwen3 family: attention (GQA), gated MLP, RMSNorms. */
export function shapeFromHfConfig(cfg: Record<string, unknown>): ModelShape | undefined {
  const n = (k: string) => (typeof cfg[k] === 'number' ? (cfg[k] as number) : undefined);
  const hidden = n('hidden_size');
  const heads = n('num_attention_heads');
  const layers = n('num_hidden_layers');
  const intermediate = n('intermediate_size');
  const vocab = n('vocab_size');
  if (!hidden || !heads || !layers || !intermediate || !vocab) return undefined;
  return {
    vocab, hidden, intermediate, layers, heads, kvHeads: n('num_key_value_heads') ?? heads,
    headDim: n('head_dim') ?? hidden / heads, tied: cfg.tie_word_embeddings === true,
  };
}

/** The model's shape: its config.json when the directory is here, else a known name. */
export function modelShape(c: RunConfig): { shape?: ModelShape; source: string } {
  const file = path.join(c.model.path, 'config.json');
  if (existsSync(file)) {
    try {
      const shape = shapeFromHfConfig(JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>);
      if (shape) return { shape, source: file };
    } catch {
      // fall through to the known names
    }
  }
  const known = KNOWN_SHAPES[c.model.name];
  return known ? { shape: known, source: `model.name "${c.model.name}" (built-in shape)` } : { source: 'unknown' };
}

/** Parameters per decoder layer: q, k, v, o, the gated MLP, two RMSNorms and q/k norms. */
export function layerParams(s: ModelShape): number {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  return s.hidden * q + 2 * s.hidden * kv + q * s.hidden + 3 * s.hidden * s.intermediate + 2 * s.hidden + 2 * s.headDim;
}

export function totalParams(s: ModelShape): number {
  return s.vocab * s.hidden * (s.tied ? 1 : 2) + s.layers * layerParams(s) + s.hidden;
}

/** LoRA parameters: r x (in + out) per adapted projection per layer. */
export function loraParams(s: ModelShape, rank: number, targets: readonly string[]): number {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  const dims: Record<string, [number, number]> = {
    q_proj: [s.hidden, q], k_proj: [s.hidden, kv], v_proj: [s.hidden, kv], o_proj: [q, s.hidden],
    gate_proj: [s.hidden, s.intermediate], up_proj: [s.hidden, s.intermediate], down_proj: [s.intermediate, s.hidden],
  };
  let per = 0;
  for (const t of targets) {
    const d = dims[t];
    if (d) per += rank * (d[0] + d[1]);
  }
  return per * s.layers;
}

/**
 * Bytes one token keeps alive through one uncheckpointed decoder layer until backward (bf16):
 * the inputs of both norms and of every projection, q/k before and after their norms and RoPE,
 * attention's output, and the MLP's gate, up, activation and product. Checked against an H100:
 * Qwen3-8B, no checkpointing, 4,096 tokens a micro-batch (BENCHMARKS.md, issue 15 ladder).
 */
export function layerActivationBytesPerToken(s: ModelShape): number {
  const q = s.heads * s.headDim;
  const kv = s.kvHeads * s.headDim;
  return 2 * (6 * s.hidden + 5 * q + 6 * kv + 4 * s.intermediate);
}

export type Parallelism = 'single' | 'replicate' | 'fsdp';

export interface MemoryEstimate {
  ranks: number;
  /** How the ranks hold the model: each a whole copy (replicate), or shards of it (fsdp). */
  parallelism: Parallelism;
  /** Tokens in the largest forward: a packed row of micro_batch_tokens, or one sample of seq_len. */
  tokens: number;
  params: number;
  trainableParams: number;
  parts: { weights: number; trainable: number; activations: number; logprobs: number };
  /** Sum of the parts: PyTorch's peak allocated, per GPU. */
  allocated: number;
  /** With fragmentation and the CUDA context: what the process takes from the GPU. */
  total: number;
}

/**
 * Per GPU, one trainer rank:
 * - weights: bf16, 2 bytes a parameter (sharded over the ranks under fsdp);
 * - trainable state: LoRA keeps a bf16 compute copy, fp32 masters, fp32 gradients and AdamW's
 *   two fp32 moments (2 + 4 + 4 + 8 = 18 bytes a parameter); full fine-tuning on one GPU is
 *   bf16 AdamW (gradient + two moments, 6 bytes beyond the weights), across ranks fp32 shards
 *   (master, gradient, two moments: 16 bytes, sharded; the bf16 weights are then gathered a layer at a time);
 * - activations: with checkpointing, each checkpointed layer keeps its bf16 input (2 x hidden
 *   bytes a token) and one layer is recomputed at a time; uncheckpointed layers keep everything;
 * - logprobs: one chunk of fp32 logits, its softmax, its gradient and a spare (4 x 4 bytes x vocab
 *   per chunk token; measured 2.37-2.43 GiB for Qwen3's vocabulary at 1,024 tokens a chunk).
 */
export function estimateTrainerMemory(c: RunConfig, s: ModelShape, parallelism: Parallelism = chooseParallelism(c, s)): MemoryEstimate {
  const t = c.trainer;
  const ranks = t.gpu.count;
  const shards = parallelism === 'fsdp' ? ranks : 1;
  const tokens = Math.max(t.micro_batch_tokens, c.orchestrator.seq_len);
  const params = totalParams(s);
  const lora = t.mode === 'lora';
  const trainableParams = lora ? loraParams(s, t.lora.rank, t.lora.target_modules) : params;
  const weights = (2 * params) / shards;
  let trainable: number;
  if (lora) trainable = (18 * trainableParams) / shards;
  else trainable = shards === 1 ? 6 * params : (16 * params) / shards + (2 * layerParams(s));
  const freq = t.ac.freq;
  const checkpointed = freq > 0 ? Math.ceil(s.layers / freq) : 0;
  const perLayer = layerActivationBytesPerToken(s);
  const activations = tokens * (checkpointed * 2 * s.hidden + (s.layers - checkpointed) * perLayer + (checkpointed > 0 ? perLayer : 0));
  const logprobs = Math.min(LOGPROB_CHUNK_TOKENS, tokens) * s.vocab * 16;
  const allocated = weights + trainable + activations + logprobs;
  return {
    ranks, parallelism, tokens, params, trainableParams,
    parts: { weights, trainable, activations, logprobs },
    allocated,
    total: allocated * (1 + FRAGMENTATION) + CONTEXT_BYTES,
  };
}

const gib = (b: number) => (b / GiB).toFixed(1);

/** The trainer's share of one GPU: trainer.gpu.memory_gib, less vLLM's share when it runs beside it. */
function trainerShare(c: RunConfig): number | undefined {
  const gpu = c.trainer.gpu;
  if (gpu.memory_gib === undefined) return undefined;
  const util = c.inference.gpu_memory_utilization;
  return gpu.memory_gib * GiB * (util === undefined ? 1 : 1 - util);
}

/**
 * What the trainer will do over trainer.gpu.count ranks (trainer/ratchet_trainer/core/parallelism.py):
 * `trainer.parallelism` when set; under `auto`, replicate when one rank's whole-model estimate fits the
 * trainer's share of a GPU, else fsdp. Without memory_gib the trainer decides from its GPUs' free
 * memory; this assumes replicate for LoRA and fsdp for full fine-tuning.
 */
export function chooseParallelism(c: RunConfig, s: ModelShape): Parallelism {
  const t = c.trainer;
  if (t.gpu.count === 1) return 'single';
  if (t.parallelism !== 'auto') return t.parallelism;
  const share = trainerShare(c);
  if (share === undefined) return t.mode === 'lora' ? 'replicate' : 'fsdp';
  return estimateTrainerMemory(c, s, 'replicate').total <= share ? 'replicate' : 'fsdp';
}

/** `ratchet check`'s GPU section: the estimate, and whether trainer and vLLM fit one GPU together. */
export function checkGpuMemory(c: RunConfig, found: { shape?: ModelShape; source: string } = modelShape(c)): CheckLine[] {
  if (c.trainer.device === 'cpu') return [ok('gpu', 'trainer.device = "cpu": no GPU memory to check')];
  if (!found.shape) {
    return [warn('gpu', `cannot estimate the trainer's GPU memory: no config.json in ${c.model.path} and model.name "${c.model.name}" ` +
      `is not one of ${Object.keys(KNOWN_SHAPES).join(', ')}`)];
  }
  const e = estimateTrainerMemory(c, found.shape);
  const p = e.parts;
  const detail = `weights ${gib(p.weights)} + ${c.trainer.mode === 'lora' ? 'LoRA' : 'trainable'} state ${gib(p.trainable)} + ` +
    `activations ${gib(p.activations)} (${e.tokens} tokens, trainer.ac.freq = ${c.trainer.ac.freq}) + logprob chunk ${gib(p.logprobs)} = ` +
    `${gib(e.allocated)} GiB allocated, ${gib(e.total)} GiB with fragmentation and the CUDA context` +
    (e.ranks > 1 ? `, per GPU over ${e.ranks} ranks (${e.parallelism === 'fsdp' ? 'FSDP2 shards' : 'the model replicated on each'}, ` +
      `trainer.parallelism = "${c.trainer.parallelism}")` : '') + `; shape from ${found.source}`;
  const gpu = c.trainer.gpu;
  const share = trainerShare(c);
  if (gpu.memory_gib === undefined || share === undefined) {
    return [ok('gpu', `trainer peak estimate: ${detail}. Set trainer.gpu.memory_gib to check that it fits`)];
  }
  const util = c.inference.gpu_memory_utilization;
  const who = util === undefined ? `trainer.gpu.memory_gib = ${gpu.memory_gib}`
    : `trainer.gpu.memory_gib = ${gpu.memory_gib} x (1 - inference.gpu_memory_utilization = ${util}) = ${gib(share)} GiB left by vLLM`;
  if (e.total > share) {
    return [fail('gpu', `the trainer needs about ${gib(e.total)} GiB per GPU but ${who}. Estimate: ${detail}. ` +
      'Fix: lower orchestrator.seq_len or trainer.micro_batch_tokens, set trainer.ac.freq = 1, use trainer.mode = "lora" ' +
      `or a smaller trainer.lora.rank, lower inference.gpu_memory_utilization, or add GPUs (trainer.gpu.count` +
      `${e.parallelism === 'replicate' ? ' with trainer.parallelism = "fsdp"' : ''})`)];
  }
  return [ok('gpu', `trainer fits: about ${gib(e.total)} GiB of ${gib(share)} GiB (${who}). Estimate: ${detail}`)];
}
