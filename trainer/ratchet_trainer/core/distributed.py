"""Past one GPU: the same step as an FSDP2 (`fully_shard`) job over torch.distributed ranks.

Every rank holds the whole batch (it is small next to the model) and trains a
contiguous block of its samples; the loss normalisers stay batch-wide, so the
sum over ranks of their gradients is the single-process gradient, and FSDP2 is
told to sum (divide factor 1), not average. Ranks must run the same number of
forward/backward passes (each is a collective), so a rank with fewer
micro-batches runs empty ones (all tokens masked: zero loss, zero gradient).

Started by torchrun (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`...); this module only
uses an initialised default process group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from .batch import BatchError


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_samples(num_samples: int, world_size: int, rank: int) -> list[int]:
    """This rank's contiguous block of samples; the batch must divide evenly (checked before any work)."""
    if num_samples % world_size:
        raise BatchError(
            f"the batch has {num_samples} samples, which {world_size} ranks cannot split evenly. "
            f"Fix: make the batch size (orchestrator batch_size) a multiple of the world size {world_size}, "
            "or run with a world size that divides it")
    per = num_samples // world_size
    return list(range(rank * per, (rank + 1) * per))


def shard_model(model: torch.nn.Module, layers: list[torch.nn.Module], decoder: torch.nn.Module,
                param_dtype: torch.dtype | None) -> None:
    """fully_shard each decoder layer, then the decoder (embeddings, final norm). The output
    projection stays whole on every rank: chunked logprobs use its weight directly, outside any
    module call that FSDP could hook; `reduce_replicated_grads` sums its gradient when trained.
    param_dtype (bf16): compute copies gathered in bf16 while the sharded parameters (and the
    optimiser) stay fp32, gradients reduced in fp32."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else MixedPrecisionPolicy()
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(decoder, mp_policy=mp)


def reduce_replicated_grads(params: list[torch.nn.Parameter]) -> None:
    """Average (as FSDP does) the gradients of parameters FSDP does not shard (the output projection
    in full fine-tuning)."""
    for p in params:
        if p.grad is not None and not hasattr(p.grad, "full_tensor"):
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def collective_device() -> torch.device:
    """Where the default group's collectives run: NCCL reduces only CUDA tensors, gloo CPU ones."""
    if "nccl" in str(dist.get_backend()).lower():
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_reduce_sums(values: list[float], op=None) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=collective_device())
    dist.all_reduce(t, op=op or dist.ReduceOp.SUM)
    return t.tolist()


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The full value of a (possibly sharded) tensor, gathered from every rank."""
    return t.full_tensor() if hasattr(t, "full_tensor") else t
