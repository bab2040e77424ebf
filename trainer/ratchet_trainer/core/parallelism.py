"""How a trainer spreads over several ranks: the parallelism follows the model.

- `replicate`: every rank holds the whole model, trains its share of the batch's trajectories
  alone (no collective inside the model: compile, packing and micro-batches as one process has
  them), and the trainable gradients are summed once per optimiser step. The update is one
  process's, on every rank. Chosen when the model trains on one GPU.
- `fsdp`: FSDP2 shards weights, gradients and optimiser state (distributed.shard_model), with
  meta-device initialisation for pretrained weights (sharded_init.py). For models that do not fit
  one GPU beside their activations (full fine-tuning of 8B and up, or a base too big for a GPU).
- `single`: one process.

`auto` picks replicate when the one-GPU memory estimate fits the free memory of every rank's GPU,
else fsdp (and fsdp on CPUs). The estimate is the one `ratchet check` makes (src/check/gpu.ts, docs/gpu.md), written
here a second time because the trainer decides on its own GPUs; test_parallelism.py holds it to
the TypeScript test's hand computation.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any, Mapping

import torch

from .config import TrainerConfig

log = logging.getLogger(__name__)

GIB = 2**30
CONTEXT_BYTES = 1 * GIB  # CUDA context, cuBLAS/NCCL workspaces (gpu.ts CONTEXT_BYTES)
FRAGMENTATION = 0.1  # reserved over allocated (gpu.ts FRAGMENTATION)


def hf_config(cfg: TrainerConfig) -> Mapping[str, Any]:
    if cfg.model.config is not None:
        return cfg.model.config
    return json.loads((Path(cfg.model.path) / "config.json").read_text())


def one_gpu_bytes(cfg: TrainerConfig, hf: Mapping[str, Any]) -> float:
    """The trainer's peak on one GPU (gpu.ts estimateTrainerMemory with one rank): bf16 weights,
    LoRA state 18 bytes a parameter or bf16 AdamW 6, activations of the largest forward, one
    logprob chunk; then fragmentation and the CUDA context."""
    hidden, layers, inter, vocab = hf["hidden_size"], hf["num_hidden_layers"], hf["intermediate_size"], hf["vocab_size"]
    heads = hf["num_attention_heads"]
    kv_heads = hf.get("num_key_value_heads") or heads
    head_dim = hf.get("head_dim") or hidden // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    layer = hidden * q + 2 * hidden * kv + q * hidden + 3 * hidden * inter + 2 * hidden + 2 * head_dim
    params = vocab * hidden * (1 if hf.get("tie_word_embeddings") is True else 2) + layers * layer + hidden
    if cfg.adapter is not None:
        dims = {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden),
                "gate_proj": (hidden, inter), "up_proj": (hidden, inter), "down_proj": (inter, hidden)}
        lora = layers * sum(cfg.adapter.rank * sum(dims[t]) for t in cfg.adapter.target_modules if t in dims)
        trainable = 18 * lora
    else:
        trainable = 6 * params
    tokens = max(cfg.micro_batch_tokens, cfg.seq_len)
    per_layer = 2 * (6 * hidden + 5 * q + 6 * kv + 4 * inter)
    checkpointed = math.ceil(layers / cfg.ac.freq) if cfg.ac.freq > 0 else 0
    activations = tokens * (checkpointed * 2 * hidden + (layers - checkpointed) * per_layer + (per_layer if checkpointed else 0))
    logprobs = min(cfg.logprob_chunk_tokens or tokens, tokens) * vocab * 16
    return (2 * params + trainable + activations + logprobs) * (1 + FRAGMENTATION) + CONTEXT_BYTES


def choose_parallelism(cfg: TrainerConfig, world_size: int, device: torch.device) -> str:
    """'single', 'replicate' or 'fsdp'; the same on every rank (auto agrees through one all-reduce)."""
    if world_size == 1:
        return "single"
    if cfg.parallelism != "auto":
        return cfg.parallelism
    if device.type != "cuda":
        # No GPU memory to estimate against. Ranks on CPUs exist for the gloo tests of the sharded
        # path (the CPU stack trains in one process); the replicated one is asked for by name there.
        return "fsdp"
    import torch.distributed as dist

    need = one_gpu_bytes(cfg, hf_config(cfg))
    free = torch.tensor([float(torch.cuda.mem_get_info(device)[0])], dtype=torch.float64, device=device)
    dist.all_reduce(free, op=dist.ReduceOp.MIN)
    choice = "replicate" if need <= float(free[0]) else "fsdp"
    log.info("trainer parallelism chosen from the one-GPU memory estimate",
             extra={"parallelism": choice, "estimate_gib": round(need / GIB, 1), "free_gib_min_rank": round(float(free[0]) / GIB, 1),
                    "world_size": world_size})
    return choice
