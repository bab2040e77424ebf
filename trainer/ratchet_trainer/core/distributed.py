"""Past one GPU: the same step over torch.distributed ranks, the model replicated on every rank
or sharded by FSDP2 (`fully_shard`); parallelism.py chooses.

Every rank holds the whole batch (it is small next to the model) and trains a
share of its trajectories: `partition_trajectories` deals whole trajectories
(all of a trajectory's segments) to the ranks, balanced by tokens, for any
sample count; a rank may get none. The loss normalisers stay batch-wide
(loss.Normalizer), and since no trajectory spans two ranks each rank's loss is
exactly its trajectories' terms of the single-process loss (GSPO's sequence
ratio, advantage and TIS weight included), so the sum over ranks of their
gradients is the single-process gradient for every loss type and normalisation.
Replicated, `sum_grads` sums the trainable gradients once per optimiser update.
FSDP2 averages the ranks' gradients, so each rank's loss is scaled by the world
size, and ranks must run the same number of forward/backward passes (each is a
collective): `plan_passes` plans every rank's micro-batches on every rank, and a
rank with fewer runs empty ones (all tokens masked: zero loss, zero gradient).

Started by torchrun (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`...); this module only
uses an initialised default process group.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def world() -> tuple[int, int]:
    """(rank, world size); (0, 1) without an initialised process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def partition_trajectories(units: list[list[int]], lengths: list[int], world_size: int) -> list[list[int]]:
    """Each rank's samples, in batch order: whole units (a trajectory's segments), balanced by tokens.

    Longest-processing-time first: units by decreasing tokens (ties: batch order),
    each to the rank with the fewest tokens so far (ties: the lowest rank). The
    result depends only on the batch and the world size, so every rank computes
    every rank's share. Any number of units works; ranks beyond it get none.
    """
    if world_size == 1:
        return [[i for u in units for i in u]]
    size = [sum(lengths[i] for i in u) for u in units]
    load = [0] * world_size
    shares: list[list[int]] = [[] for _ in range(world_size)]
    for k in sorted(range(len(units)), key=lambda k: (-size[k], k)):
        r = min(range(world_size), key=lambda r: (load[r], r))
        shares[r].extend(units[k])
        load[r] += size[k]
    return [sorted(s) for s in shares]


def plan_passes(lengths: list[int], units: list[list[int]], world_size: int, budget: int, packing: bool,
                keep_units: bool) -> list[list[list[int]]]:
    """Every rank's micro-batches (lists of batch sample ids) for one step.

    Trajectories never span ranks. Within a rank, a unit's segments share a
    micro-batch only when `keep_units` (a sequence-level loss: GSPO's ratio is
    over the whole trajectory); for token-level losses segments are planned like
    any sample, so a long multi-turn trajectory spreads over micro-batches and
    the out-of-memory retry can split it further.
    """
    from .batch import plan_micro_batches, plan_packed_micro_batches

    plan = plan_packed_micro_batches if packing else plan_micro_batches
    out = []
    for mine in partition_trajectories(units, lengths, world_size):
        pos = {g: i for i, g in enumerate(mine)}
        local_units = [[pos[i] for i in u] for u in units if u and u[0] in pos] if keep_units else None
        out.append([[mine[i] for i in g] for g in plan([lengths[i] for i in mine], budget, local_units)] if mine else [])
    return out


def plan_checksum(plans: list[list[list[int]]]) -> int:
    """A number every rank that planned the same passes computes alike (exact in float64)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(repr(plans).encode()).digest()[:6], "big")


def shard_model(model: torch.nn.Module, layers: list[torch.nn.Module], decoder: torch.nn.Module,
                param_dtype: torch.dtype | None) -> None:
    """fully_shard each decoder layer, then the decoder (embeddings, final norm). The output
    projection stays whole on every rank: chunked logprobs use its weight directly, outside any
    module call that FSDP could hook; `reduce_replicated_grads` sums its gradient when trained.
    param_dtype (bf16): compute copies gathered in bf16 while the sharded parameters (and the
    optimiser) stay fp32, gradients reduced in fp32.
    A trained tied embedding (full fine-tuning of Qwen3-4B and smaller) stays whole, the head's own tensor."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32) if param_dtype else MixedPrecisionPolicy()
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    tied = trained_tied_embedding(model)
    fully_shard(decoder, mp_policy=mp, ignored_params={tied} if tied is not None else None)
    if tied is not None and param_dtype is not None:
        # Outside FSDP's casts: its rows enter the layers in the compute dtype, as a sharded embedding's do
        # (a lookup, so the same values), else attention meets fp32 and bf16 together in recomputation.
        model.get_input_embeddings().register_forward_hook(lambda _m, _i, out: out.to(param_dtype))


def trained_tied_embedding(model: torch.nn.Module) -> torch.nn.Parameter | None:
    """The input embedding when it is the output projection's weight and trains. Sharded, it would become a
    new parameter and the head keep the old one: two tensors trained apart where one process trains one, and
    a checkpoint's model/ holding two values for the one tensor its config ties. (Frozen, under LoRA, the
    split changes no value, and DCP's frozen-parameter filter does not follow a tie: left as it was.)"""
    head, embed = model.get_output_embeddings(), model.get_input_embeddings()
    if head is not None and head.weight is embed.weight and embed.weight.requires_grad:
        return embed.weight
    return None


def reduce_replicated_grads(params: list[torch.nn.Parameter]) -> None:
    """Average (as FSDP does) the gradients of parameters FSDP does not shard (the output projection
    in full fine-tuning)."""
    for p in params:
        if p.grad is not None and not hasattr(p.grad, "full_tensor"):
            dist.all_reduce(p.grad)
            p.grad.div_(dist.get_world_size())


def sum_grads(params: list[torch.nn.Parameter], bucket_bytes: int = 256 * 2**20) -> None:
    """Replicated ranks: every parameter's gradient becomes the sum of the ranks' (a rank that trained
    nothing adds zeros). A few flat all-reduces of whole buckets rather than one per tensor: LoRA's
    hundreds of small adapter gradients go in one, a full model's in buckets of `bucket_bytes`."""
    bucket: list[torch.nn.Parameter] = []

    def flush() -> None:
        if not bucket:
            return
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in bucket])
        dist.all_reduce(flat)
        off = 0
        for p in bucket:
            n = p.numel()
            p.grad = flat[off:off + n].view_as(p)
            off += n
        bucket.clear()

    size = 0
    for p in params:
        if bucket and (p.dtype != bucket[0].dtype or p.device != bucket[0].device or size + p.numel() * p.element_size() > bucket_bytes):
            flush()
            size = 0
        bucket.append(p)
        size += p.numel() * p.element_size()
    flush()


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
