"""A model built for FSDP2 without ever being whole on a GPU: the path for models that outgrow one.

Every rank builds the model's structure on the meta device (no memory, no weights read),
shards it, and only then allocates its own shards on its device. Rank 0 alone reads the
weights, on the CPU (a host has more memory than a GPU), and broadcasts them tensor by
tensor; each rank keeps its shard of each. This is how torchtune and torchtitan load a
pretrained model under FSDP2. A GPU's peak while loading is its shards plus one tensor.

Used when the weights come from `model.path`. A model given as a bare `model.config`
(random init: benchmarks and tests) is still built on each device, so its seeded weights
stay bit-identical to a single process's and to a restart's.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.distributed as dist
from torch import nn

from .config import TrainerConfig
from .distributed import trained_tied_embedding, world
from .model import build_model


def upcast_trainable(model: nn.Module) -> None:
    """FSDP2's mixed precision is the master-weight scheme across ranks: trainable shards are fp32."""
    for p in model.parameters():
        if p.requires_grad:
            p.data = p.data.float()


def build_sharded_from_rank0(cfg: TrainerConfig, device: torch.device, attn: str, compute: torch.dtype,
                             prepare: Callable[[nn.Module], None]) -> nn.Module:
    """The trainable model (base + fresh adapter), sharded by `prepare` (compile, fully_shard) while
    still on the meta device, then materialised on `device` with rank 0's weights."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank, _ = world()
    full = None
    if rank == 0:
        full = build_model(cfg, torch.device("cpu"), attn, dtype=compute)
        upcast_trainable(full)
    model = build_model(cfg, torch.device("meta"), attn, dtype=compute)
    upcast_trainable(model)
    prepare(model)
    tied = trained_tied_embedding(model) is not None  # left whole by shard_model
    model.to_empty(device=device)
    if tied:  # to_empty gives each module its own new parameter: the head would train apart from the embedding
        model.get_output_embeddings().weight = model.get_input_embeddings().weight
    set_model_state_dict(model, full.state_dict() if full is not None else {},
                         options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True, strict=True))
    # Buffers outside the state dict (RoPE's inverse frequencies) are garbage after to_empty.
    sources = dict(full.named_buffers()) if full is not None else {}
    for name, buf in model.named_buffers():
        if rank == 0:
            buf.copy_(sources[name])
        dist.broadcast(buf, src=0)
    del full
    return model
