"""The training core: one model, its optimiser, and the ledger of applied steps.

No Temporal here: the worker wraps this, the benchmark and tests drive it directly.
A step is applied at most once per (run, step): the ledger records each applied
step's metrics and the sha256 of the batch it trained on; a re-delivered step
(same batch) returns them with applied=False, and the same step with another
batch is refused (StepConflictError), never answered with the other batch's result.

Faults that are deterministic for one step are typed, so the run records the
step as skipped instead of retrying it forever: a non-finite gradient
(NonFiniteGradientError, nothing applied), an out-of-memory error that
survives one retry with micro-batches of half the tokens (StepOutOfMemoryError),
and, across ranks, a batch the ranks could not agree on a plan for
(StepPartitionError, raised on every rank before any forward pass).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import logging
import time
from typing import Any, Callable

import torch

from .batch import (Batch, BatchError, MicroBatch, check_batch_fits, make_micro_batch, make_packed_micro_batch,
                    make_shared_micro_batch, micro_batch_token_index, plan_micro_batches, plan_packed_micro_batches,
                    plan_shared_micro_batches)
from .config import ConfigError, TrainerConfig
from .distributed import (all_reduce_sums, collective_device, local_tensor, plan_checksum, plan_passes,
                          reduce_replicated_grads, shard_model, sum_grads, world)
from .logprobs import HeadInput, token_logprobs
from .loss import LossStats, Normalizer, micro_batch_loss
from .model import (build_model, check_kernel_support, chunked_head_supported, compile_layers, compile_stats, decoder_layers,
                    resolve_attn_implementation, resolve_device, resolve_dtype, set_attn_implementation,
                    set_training_mode, vocab_size)
from .parallelism import choose_parallelism
from .precision import MasterWeights
from .sharded_init import build_sharded_from_rank0, upcast_trainable

log = logging.getLogger(__name__)

Heartbeat = Callable[[dict[str, Any]], None]


class StepOrderError(ValueError):
    """A step older than the newest applied one that is not in the ledger: it can never be applied."""


class StepConflictError(ValueError):
    """The step is in the ledger, applied from another batch: its result cannot answer this one."""


class NonFiniteGradientError(FloatingPointError):
    """The step's gradient is NaN or infinite; the update was not applied and the weights are unchanged."""


class StepOutOfMemoryError(RuntimeError):
    """The step ran out of memory, and again with micro-batches of half the tokens; nothing was applied."""


class StepPartitionError(RuntimeError):
    """Across ranks: the step's passes could not be planned, or the ranks planned different passes.
    Raised on every rank alike before any forward pass; nothing was applied."""


def is_out_of_memory(e: BaseException) -> bool:
    return isinstance(e, (torch.OutOfMemoryError, MemoryError)) or (
        isinstance(e, RuntimeError) and "out of memory" in str(e).lower())


def step_seed(seed: int, step: int) -> int:
    # Each step draws its randomness (LoRA dropout) from (seed, step) alone, so a
    # step replayed on a fresh worker after a crash computes the same update.
    return (seed * 1_000_003 + step) % (2**63 - 1)


def _merge_stats(into: LossStats, s: LossStats) -> None:
    """Add one update's stats to the step's: sums add, maxima take the max, updates count."""
    for f in dataclasses.fields(LossStats):
        if f.name in ("ratio_max", "abs_delta_max"):
            setattr(into, f.name, max(getattr(into, f.name), getattr(s, f.name)))
        elif f.name == "extra":  # sums too (sft's nll_sum)
            for k, v in s.extra.items():
                into.extra[k] = into.extra.get(k, 0.0) + v
        else:
            setattr(into, f.name, getattr(into, f.name) + getattr(s, f.name))


def resolve_shared_prefix(cfg: TrainerConfig, packing: bool, attn_implementation: str) -> bool:
    """Whether micro-batches are prefix trees (batch.py): they need an attention that reads a 4-D mask."""
    reads_mask = attn_implementation in ("sdpa", "eager")
    if cfg.shared_prefix is True and packing:
        raise ConfigError("trainer_config.shared_prefix = true and packing (true, or \"auto\" on CUDA) are two layouts of "
                          "a micro-batch; a prefix-tree row is already unpadded. Fix: set packing = false, or "
                          "shared_prefix = false")
    if cfg.shared_prefix is True and not reads_mask:
        raise ConfigError(
            f"trainer_config.shared_prefix = true needs sdpa or eager attention (a 4-D mask), but the trainer uses "
            f"{attn_implementation} (packing = {packing}). Fix: set packing = false and model.attn_implementation = "
            "\"sdpa\", or shared_prefix = \"auto\"")
    return cfg.shared_prefix is True or (cfg.shared_prefix == "auto" and not packing and reads_mask)


def step_cost(device: torch.device, wall_s: float, cpu_s: float, world_size: int) -> dict[str, float]:
    """The cost ledger's trainer figures (docs/operations.md): this process's CPU-seconds for the step, and
    GPU-seconds as the step's wall time on each rank's device (one GPU a rank), 0 on a CPU trainer."""
    gpu_s = wall_s * world_size if device.type == "cuda" else 0.0
    return {"cpu_s": round(cpu_s, 3), "gpu_s": round(gpu_s, 3)}


class Trainer:
    def __init__(self, run_id: str, cfg: TrainerConfig, device: torch.device | None = None,
                 model: torch.nn.Module | None = None):
        """`model`, if given, is already built for cfg (the benchmark reuses one base model)."""
        self.run_id = run_id
        self.cfg = cfg
        self.device = device or resolve_device(cfg)
        self.packing = cfg.packing if isinstance(cfg.packing, bool) else self.device.type == "cuda"
        # Kernel options are checked before any model is built or touched.
        self.attn_implementation = resolve_attn_implementation(cfg, self.device, self.packing)
        check_kernel_support(cfg, self.device, self.attn_implementation)
        self.shared_prefix = resolve_shared_prefix(cfg, self.packing, self.attn_implementation)
        self.rank, self.world_size = world()
        # single | replicate (whole model on every rank) | fsdp (sharded): parallelism.py
        self.parallelism = choose_parallelism(cfg, self.world_size, self.device)
        self.sharded = self.parallelism == "fsdp"
        self.compiled = cfg.model.compile is True or (cfg.model.compile == "auto" and self.device.type == "cuda")
        compute = resolve_dtype(cfg, self.device)

        def prepare(m: torch.nn.Module) -> None:  # compile, then (across ranks) shard
            if self.compiled:
                compile_layers(m)
            if self.sharded:
                causal = m.get_base_model() if hasattr(m, "get_base_model") else m
                shard_model(m, decoder_layers(m), causal.get_decoder(), compute if compute != torch.float32 else None)

        if model is None and self.sharded and cfg.model.path is not None:
            # Pretrained weights across ranks: never whole on a GPU (sharded_init.py).
            model = build_sharded_from_rank0(cfg, self.device, self.attn_implementation, compute, prepare)
        else:
            if model is None:
                model = build_model(cfg, self.device, self.attn_implementation)
            else:
                set_attn_implementation(model, self.attn_implementation)
            if self.sharded:
                upcast_trainable(model)
            prepare(model)
        self.model = model
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        # Logprobs from hidden states in chunks, unless the model post-processes its logits.
        self.logprob_chunk_tokens = cfg.logprob_chunk_tokens if chunked_head_supported(self.model) else 0
        # bf16 LoRA: the model computes with bf16 adapters, the optimiser steps fp32 masters.
        self.master: MasterWeights | None = None
        if (not self.sharded and cfg.adapter is not None and cfg.model.lora_dtype == "auto"
                and compute != torch.float32):
            self.master = MasterWeights(self.params, compute)
        o = cfg.optim
        # FSDP full fine-tuning trains sharded (DTensor) and unsharded (the head) parameters: the fused and
        # foreach kernels refuse such a mix, so those step one tensor at a time.
        mixed = len({hasattr(p, "full_tensor") for p in self.params}) > 1
        self.optimizer = torch.optim.AdamW(
            self.master.masters if self.master else self.params, lr=o.lr, betas=o.betas, eps=o.eps,
            weight_decay=o.weight_decay, fused=self.device.type == "cuda" and not mixed, foreach=False if mixed else None,
        )
        self.ref_model = None
        if cfg.loss.kl_coef > 0 and cfg.adapter is None:
            # Full fine-tuning has no adapter to switch off: keep a frozen copy.
            import copy

            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.ledger: dict[int, dict[str, Any]] = {}
        # [model] init_from: the adapter this run started from (init_adapter.py), None from the base model.
        self.init_from: dict[str, Any] | None = None
        # The KL reference's LoRA weights where it is not the base model: a warm start's adapter (peft
        # keys, whole, on CPU), kept in the run's checkpoints. None: the reference is the adapter disabled.
        self.kl_reference: dict[str, torch.Tensor] | None = None
        self._kl_reference_pairs: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self.vocab_size = vocab_size(self.model)

    # -- state -----------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return len(self.ledger)

    @property
    def last_step(self) -> int:
        return max(self.ledger) if self.ledger else -1

    @property
    def optimizer_steps(self) -> int:
        """Updates the optimiser has applied, from its own state (AdamW counts per parameter):
        independent of the ledger, so a step applied twice shows up as a mismatch."""
        counts = [int(st["step"]) for st in self.optimizer.state.values() if "step" in st]
        return max(counts) if counts else 0

    def master_weights(self):
        """Context in which the model's trainable parameters are the fp32 masters (checkpoint I/O)."""
        import contextlib

        return self.master.masters_in_place() if self.master else contextlib.nullcontext()

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint must hold: the adapter (fp32 masters), or all weights for full fine-tuning."""
        if self.cfg.adapter is not None:
            from peft import get_peft_model_state_dict

            with self.master_weights():
                return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    # -- one optimiser step ----------------------------------------------------

    def applied(self, step: int, batch_sha256: str | None) -> dict[str, Any] | None:
        """The ledger's answer for a re-delivered step (applied=False), None if the step is new."""
        done = self.ledger.get(step)
        if done is None:
            return None
        had = done.get("batch_sha256")
        if batch_sha256 is not None and had is not None and had != batch_sha256:
            raise StepConflictError(
                f"run {self.run_id}: step {step} was applied from batch {had[:12]}, now asked with batch {batch_sha256[:12]}. "
                "Fix: reload the run's last recorded checkpoint (trainer.load) before redoing the step")
        log.info("step already applied; returning recorded metrics", extra={"run_id": self.run_id, "step": step})
        return {**done, "applied": False}

    def set_lr(self, lr: float) -> None:
        """A learning rate changed on the running run (`ratchet set --lr`): the optimizer's groups and the
        config take it, so the step's metrics and the next checkpoint (optimizer.pt keeps param_groups) carry it."""
        if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or not 0 <= lr <= 1:
            raise BatchError(f"lr must be a number from 0 to 1, got {lr!r}")
        if float(lr) == self.cfg.optim.lr:
            return
        self.cfg = dataclasses.replace(self.cfg, optim=dataclasses.replace(self.cfg.optim, lr=float(lr)))
        for group in self.optimizer.param_groups:
            group["lr"] = float(lr)

    def step(self, step: int, batch: Batch, heartbeat: Heartbeat | None = None, batch_sha256: str | None = None) -> dict[str, Any]:
        done = self.applied(step, batch_sha256)
        if done is not None:
            return done
        if step < self.last_step:
            raise StepOrderError(
                f"run {self.run_id}: step {step} is older than the newest applied step {self.last_step} and was never "
                "applied; steps apply in order. Fix: resume from a checkpoint taken before this step"
            )
        check_batch_fits(batch, self.vocab_size, self.cfg.seq_len, run_id=self.run_id, step=step)
        t0 = time.monotonic()
        cpu0 = time.process_time()
        norm = Normalizer.for_batch(batch, max_tokens=self.cfg.loss.max_tokens or self.cfg.seq_len)
        total = norm.total_tokens
        if total == 0:
            raise BatchError(f"batch for step {step} has no trainable tokens (loss_mask is all 0). "
                             "Fix: check the batch builder's masking")
        set_training_mode(self.model)
        budget = self.cfg.micro_batch_tokens
        several = self.cfg.updates_per_batch > 1

        def attempt(budget: int) -> tuple[LossStats, int, int, float | None]:
            if several:  # each update clipped and applied inside; all undone on failure
                return self._several_updates(step, batch, budget, heartbeat)
            return (*self._accumulate(step, batch, norm, budget, heartbeat), None)

        try:
            try:
                stats, passes, forward_tokens, grad_norm = attempt(budget)
            except Exception as e:  # noqa: BLE001 - only out-of-memory is retried, the rest re-raised
                # Across ranks a retry would desynchronise the collectives: the step fails as a whole there.
                if not is_out_of_memory(e) or self.world_size > 1:
                    raise
                self.optimizer.zero_grad(set_to_none=True)
                self._free_device_memory()
                budget = max(1, budget // 2)
                log.warning("step ran out of memory; retrying once with micro-batches of half the tokens",
                            extra={"run_id": self.run_id, "step": step, "micro_batch_tokens": budget, "error": str(e)[:300]})
                try:
                    stats, passes, forward_tokens, grad_norm = attempt(budget)
                except Exception as e2:  # noqa: BLE001
                    if not is_out_of_memory(e2):
                        raise
                    raise StepOutOfMemoryError(
                        f"run {self.run_id}: step {step} ran out of memory, and again with micro_batch_tokens={budget}; "
                        "nothing was applied. Fix: lower trainer.micro_batch_tokens or orchestrator.seq_len") from e2
            if grad_norm is None:
                grad_norm = self._clip_grads()
                if not torch.isfinite(torch.tensor(grad_norm)):
                    raise NonFiniteGradientError(f"run {self.run_id}: step {step}: gradient norm is {grad_norm}; the update was not applied")
                self.optimizer.step()
                if self.master is not None:
                    self.master.sync()
        finally:
            # Whatever happened, no half-accumulated gradient survives into the next step.
            self.optimizer.zero_grad(set_to_none=True)
            for p in self.params:
                p.grad = None

        metrics = stats.metrics(self.cfg.loss.kind)
        metrics.update(
            step=step, grad_norm=grad_norm, tokens=total, total_tokens=int(batch.input_ids.numel()),
            samples=batch.num_samples, trajectories=norm.num_trajectories, micro_batches=passes, lr=self.cfg.optim.lr,
            updates=stats.updates, parallelism=self.parallelism,
            # What the forward passes computed (one epoch), against the tokens trained: a shared
            # prefix counts once, padding counts. Shared-prefix rows hold no padding.
            processed_tokens=forward_tokens, processed_per_trained=forward_tokens / max(total, 1),
            padding_frac=0.0 if self.shared_prefix else 1.0 - int(batch.input_ids.numel()) / max(forward_tokens, 1),
            mismatch_exceeded=metrics["ratio_abs_dev"] > self.cfg.loss.mismatch_tolerance,
            duration_s=time.monotonic() - t0,
        )
        metrics.update(step_cost(self.device, metrics["duration_s"], time.process_time() - cpu0, self.world_size))
        if self.compiled:  # graphs compiled so far, and recompile-limit fallbacks to eager (model.py)
            metrics.update(compile_stats())
        if budget != self.cfg.micro_batch_tokens:
            metrics["micro_batch_tokens"] = budget
        if batch_sha256 is not None:
            metrics["batch_sha256"] = batch_sha256
        if metrics["mismatch_exceeded"]:
            log.warning("inference/trainer logprob mismatch above tolerance",
                        extra={"step": step, "ratio_abs_dev": metrics["ratio_abs_dev"],
                               "tolerance": self.cfg.loss.mismatch_tolerance})
        self.ledger[step] = metrics
        metrics = {**metrics, "policy_version": self.policy_version}
        self.ledger[step] = metrics
        log.info("step applied", extra={"run_id": self.run_id, **metrics})
        return {**metrics, "applied": True}

    def _accumulate(self, step: int, batch: Batch, norm: Normalizer, budget: int,
                    heartbeat: Heartbeat | None) -> tuple[LossStats, int, int]:
        """Forward and backward over this rank's micro-batches of at most `budget` tokens; gradients
        accumulate (and are reduced across ranks). Returns the stats, the passes and the forward tokens."""
        # The same randomness on a retry as on the first attempt: the update depends on (seed, step) only.
        torch.manual_seed(step_seed(self.cfg.seed, step))
        if self.device.type == "cuda":
            torch.cuda.manual_seed(step_seed(self.cfg.seed, step))
        groups, passes = self._plan(step, batch, budget)
        lengths = batch.sample_lengths()
        dummy = min(range(batch.num_samples), key=lambda i: (lengths[i], i))  # the cheapest empty pass
        stats = LossStats()
        forward_tokens = 0
        self.optimizer.zero_grad(set_to_none=True)
        if heartbeat is not None:
            heartbeat({"step": step, "micro_batch": 0, "micro_batches": passes})
        # Sharded, every pass is a collective: all ranks run the busiest rank's count. Replicated, none is.
        for k in range(passes if self.sharded else len(groups)):
            if k < len(groups):
                mb = self._micro_batch(batch, groups[k])
            else:  # an empty pass in lockstep with the other ranks: every token masked
                mb = self._micro_batch(batch, [dummy])
                mb.loss_mask = torch.zeros_like(mb.loss_mask)
            forward_tokens += mb.input_ids.numel()
            ref_out = self._ref_output(mb) if self.cfg.loss.kl_coef > 0 else None
            out = self._policy_output(self.model, mb)
            loss = micro_batch_loss(out, mb, self.cfg.loss, norm, stats, ref_out)
            # Ranks' gradients are averaged (FSDP): scaled by the world size, the average is the sum.
            (loss * self.world_size if self.sharded else loss).backward()
            del out, loss, ref_out
            if heartbeat is not None:
                heartbeat({"step": step, "micro_batch": k + 1, "micro_batches": passes})
        if self.sharded:
            reduce_replicated_grads(self.params)
        elif self.world_size > 1:  # replicated: each rank's part of the gradient, summed once per update
            sum_grads(self.master.masters if self.master else self.params)
        if self.world_size > 1:
            sums = all_reduce_sums([stats.loss, stats.tokens, stats.entropy_sum, stats.clipped,
                                    stats.abs_ratio_dev_sum, stats.mismatch_k3_sum, stats.kl_ref_sum,
                                    stats.seq_clipped, stats.seqs, forward_tokens])
            (stats.loss, stats.tokens, stats.entropy_sum, stats.clipped, stats.abs_ratio_dev_sum,
             stats.mismatch_k3_sum, stats.kl_ref_sum, stats.seq_clipped, stats.seqs, forward_tokens) = sums
            stats.ratio_max = all_reduce_sums([stats.ratio_max], torch.distributed.ReduceOp.MAX)[0]
            (stats.mismatch_tokens, stats.abs_delta_sum, stats.masked, stats.floor, stats.capped) = all_reduce_sums(
                [stats.mismatch_tokens, stats.abs_delta_sum, stats.masked, stats.floor, stats.capped])
            stats.abs_delta_max = all_reduce_sums([stats.abs_delta_max], torch.distributed.ReduceOp.MAX)[0]
            stats.dual_clipped, stats.policy_dev_sum = all_reduce_sums([stats.dual_clipped, stats.policy_dev_sum])
            if self.cfg.loss.kind == "sft":  # a rank with no tokens has none: 0
                stats.extra["nll_sum"] = all_reduce_sums([stats.extra.get("nll_sum", 0.0)])[0]
        return stats, passes, forward_tokens

    def _plan(self, step: int, batch: Batch, budget: int) -> tuple[list[list[int]], int]:
        """This rank's micro-batches and the number of passes every rank runs (the busiest rank's).

        Whole trajectories per rank, balanced by tokens (distributed.plan_passes); a trajectory's
        segments share a micro-batch only for GSPO, whose ratio spans them. One process: all samples,
        no collective. Across ranks, one all-reduce checks that every rank planned the same passes
        before any of them enters the model's collectives (a mismatch would hang them)."""
        if self.shared_prefix and self.world_size == 1:
            # One row per micro-batch, filled while its prefix tree fits the budget. (Across ranks the
            # plan below counts unshared tokens; each of its micro-batches is still laid out as a tree.)
            units = batch.trajectory_units() if self.cfg.loss.kind == "gspo" else None
            groups = plan_shared_micro_batches(batch, list(range(batch.num_samples)), budget, units)
            return groups, len(groups)
        try:
            plans = plan_passes(batch.sample_lengths(), batch.trajectory_units(), self.world_size, budget,
                                self.packing, keep_units=self.cfg.loss.kind == "gspo")
        except Exception as e:  # noqa: BLE001 - same batch, same code: every rank fails here alike
            raise StepPartitionError(f"run {self.run_id}: step {step}: could not plan the batch's "
                                     f"{batch.num_samples} samples over {self.world_size} ranks: {e}") from e
        passes = max(len(p) for p in plans)
        if self.world_size > 1:
            mark = float(plan_checksum(plans))
            hi = all_reduce_sums([passes, -passes, mark, -mark], torch.distributed.ReduceOp.MAX)
            if hi[0] != -hi[1] or hi[2] != -hi[3]:
                raise StepPartitionError(
                    f"run {self.run_id}: step {step}: the {self.world_size} ranks planned different passes "
                    f"(between {int(-hi[1])} and {int(hi[0])}) for the same batch; nothing was applied. "
                    "Fix: run the same ratchet_trainer and trainer_config on every rank")
        return plans[self.rank], passes

    # -- several updates per batch (trainer.minibatches x trainer.epochs) --------

    def minibatches(self, batch: Batch) -> list[list[int]]:
        """The batch's samples in `cfg.minibatches` parts of whole trajectories, in batch order, each
        about the same number of trainable tokens (a trajectory's segments share GSPO's ratio and
        the normalisers count trajectories, so a trajectory is never split). Fewer parts when the
        batch has fewer trajectories."""
        units = batch.trajectory_units()
        off = batch.sample_offsets.tolist()
        weight = [sum(int(batch.loss_mask[off[i]: off[i + 1]].sum()) for i in u) for u in units]
        m = min(self.cfg.minibatches, len(units))
        total = sum(weight)
        parts: list[list[int]] = [[]]
        done = 0
        for k, (u, w) in enumerate(zip(units, weight)):
            # Close a part once it holds its share, leaving at least one unit for each part still to fill.
            if parts[-1] and len(parts) < m and (done >= total * len(parts) / m or len(units) - k <= m - len(parts)):
                parts.append([])
            parts[-1].extend(u)
            done += w
        return parts

    def _several_updates(self, step: int, batch: Batch, budget: int,
                         heartbeat: Heartbeat | None) -> tuple[LossStats, int, int, float]:
        """The decoupled objective's updates (AReaL): the proximal policy's logprobs once, with no
        gradient, then for each epoch one optimiser update per mini-batch, each normalised over its
        own mini-batch. On any failure every update is undone (weights and optimiser state as
        before the step), so a skipped step has applied nothing. Returns the stats summed over the
        updates, the training passes, one epoch's forward tokens and the largest gradient norm."""
        parts = self.minibatches(batch)  # any part trains on any world size (whole trajectories per rank)
        saved = self._snapshot()
        try:
            full = dataclasses.replace(batch, proximal_logprobs=self._proximal_logprobs(step, batch, budget, heartbeat))
            max_tokens = self.cfg.loss.max_tokens or self.cfg.seq_len
            total, passes, forward_tokens, grad_norm = LossStats(updates=0), 0, 0, 0.0
            n_updates = len(parts) * self.cfg.epochs
            for epoch in range(self.cfg.epochs):
                for j, part in enumerate(parts):
                    sub = full.subset(part)
                    norm = Normalizer.for_batch(sub, max_tokens=max_tokens)
                    if norm.total_tokens == 0:
                        continue
                    u = epoch * len(parts) + j

                    def beat(info: dict[str, Any], u: int = u) -> None:
                        if heartbeat is not None:
                            heartbeat({**info, "update": u + 1, "updates": n_updates})
                    stats, p, f = self._accumulate(step, sub, norm, budget, beat)
                    gn = self._clip_grads()
                    if not torch.isfinite(torch.tensor(gn)):
                        raise NonFiniteGradientError(
                            f"run {self.run_id}: step {step}: gradient norm is {gn} at update {u + 1} of {n_updates}; "
                            "the step's updates were undone and nothing was applied")
                    self.optimizer.step()
                    if self.master is not None:
                        self.master.sync()
                    self.optimizer.zero_grad(set_to_none=True)
                    _merge_stats(total, stats)
                    passes += p
                    forward_tokens += f if epoch == 0 else 0
                    grad_norm = max(grad_norm, gn)
            total.floor //= self.cfg.epochs  # a count per batch: each epoch sees the same tokens
            return total, passes, forward_tokens, grad_norm
        except BaseException:
            self.optimizer.zero_grad(set_to_none=True)
            self._restore(saved)
            raise

    @torch.no_grad()
    def _proximal_logprobs(self, step: int, batch: Batch, budget: int, heartbeat: Heartbeat | None = None) -> torch.Tensor:
        """[T] the current policy's logprobs of the batch's trainable tokens (0 elsewhere), at the
        run's temperature, in the training forward's numerics. Across ranks, micro-batches are
        dealt round-robin, every rank runs as many passes (an idle one re-scores a micro-batch and
        drops it), and the [T] vectors are summed: each token is scored by exactly one rank."""
        if self.shared_prefix:
            groups = plan_shared_micro_batches(batch, list(range(batch.num_samples)), budget)
        else:
            plan = plan_packed_micro_batches if self.packing else plan_micro_batches
            groups = plan(batch.sample_lengths(), budget)
        mine = groups[self.rank::self.world_size]
        passes = -(-len(groups) // self.world_size) if self.sharded else len(mine)
        out = torch.zeros(batch.input_ids.numel(), dtype=torch.float32)
        for k in range(passes):
            ids = mine[k] if k < len(mine) else groups[0]
            mb = self._micro_batch(batch, ids)
            sel = mb.loss_mask[:, 1:]
            if not self.sharded and not bool(sel.any()):
                continue  # (sharded, every pass is a collective: each rank runs every one)
            lp, _ = token_logprobs(self._policy_output(self.model, mb), mb.input_ids, sel, self.cfg.loss.temperature)
            if k < len(mine):
                index = mb.token_index if mb.token_index is not None else micro_batch_token_index(batch, ids, self.packing)
                idx = index[:, 1:][sel.cpu()]
                out[idx] = lp.float().cpu()
            if heartbeat is not None:  # progress for the stall watchdog (and the cancellation check)
                heartbeat({"step": step, "phase": "proximal", "micro_batch": k + 1, "micro_batches": passes})
        if self.world_size > 1:
            t = out.to(collective_device())
            torch.distributed.all_reduce(t)
            out = t.cpu()
        return out

    def _snapshot(self) -> tuple[list[torch.Tensor], dict[str, Any]]:
        """The trainable weights (fp32 masters under bf16 LoRA) and the optimiser state, copied."""
        import copy

        params = self.master.masters if self.master else self.params
        return [p.detach().clone() for p in params], copy.deepcopy(self.optimizer.state_dict())

    def _restore(self, saved: tuple[list[torch.Tensor], dict[str, Any]]) -> None:
        params = self.master.masters if self.master else self.params
        with torch.no_grad():
            for p, v in zip(params, saved[0]):
                p.copy_(v)
        self.optimizer.load_state_dict(saved[1])
        if self.master is not None:
            self.master.sync()

    def _free_device_memory(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _micro_batch(self, batch: Batch, sample_ids: list[int]) -> MicroBatch:
        if self.shared_prefix:
            return make_shared_micro_batch(batch, sample_ids, self.device)
        if self.packing:
            return make_packed_micro_batch(batch, sample_ids, self.device)
        return make_micro_batch(batch, sample_ids, self.device)

    @staticmethod
    def _forward_args(mb: MicroBatch) -> dict[str, Any]:
        # Packed rows carry no attention mask: transformers reads the restarting
        # position ids as sample boundaries (block-diagonal causal mask / varlen).
        kw: dict[str, Any] = dict(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False)
        if mb.attention_mask is not None:
            kw["attention_mask"] = mb.attention_mask
        return kw

    def _policy_output(self, model: torch.nn.Module, mb: MicroBatch) -> torch.Tensor | HeadInput:
        """Logits [B, L, V], or (chunked logprobs) the last hidden states with the output projection."""
        kw = self._forward_args(mb)
        if not self.logprob_chunk_tokens:
            return model(**kw).logits
        causal = model.get_base_model() if hasattr(model, "get_base_model") else model
        hidden = causal.get_decoder()(**kw).last_hidden_state
        head = causal.get_output_embeddings()
        weight, bias = head.weight, head.bias
        if weight.dtype != hidden.dtype:  # FSDP full fine-tuning trains the unsharded head in fp32: compute in bf16
            weight, bias = weight.to(hidden.dtype), bias.to(hidden.dtype) if bias is not None else None
        return HeadInput(hidden, weight, bias, chunk_tokens=self.logprob_chunk_tokens)

    def set_kl_reference(self, weights: dict[str, torch.Tensor] | None) -> None:
        """The adapter the KL term pulls towards (None: the base model, the adapter disabled)."""
        self.kl_reference = weights
        self._kl_reference_pairs = None

    def _ref_output(self, mb: MicroBatch) -> torch.Tensor | HeadInput:
        with torch.no_grad():
            if self.ref_model is not None:
                return self._policy_output(self.ref_model, mb)
            if self.kl_reference is not None:
                with self._reference_adapter():
                    return self._policy_output(self.model, mb)
            with self.model.disable_adapter():
                return self._policy_output(self.model, mb)

    @contextlib.contextmanager
    def _reference_adapter(self):
        """(Under no_grad) the model's adapter weights are the KL reference's: it is copied into the
        model's own adapter tensors (their dtype, each rank's shards) and the policy's values are put
        back on exit. A second peft adapter could not join a model already sharded."""
        if self._kl_reference_pairs is None:
            from peft import get_peft_model_state_dict

            from .sharded import distribute_like

            assert self.kl_reference is not None
            targets = get_peft_model_state_dict(self.model, state_dict=self.model.state_dict(keep_vars=True))
            self._kl_reference_pairs = [(p, distribute_like(self.kl_reference[k], p)) for k, p in targets.items()]
        pairs = self._kl_reference_pairs
        policy = [p.detach().clone() for p, _ in pairs]
        try:
            for p, ref in pairs:
                p.copy_(ref)
            yield
        finally:
            for (p, _), v in zip(pairs, policy):
                p.copy_(v)

    def _clip_grads(self) -> float:
        max_norm = self.cfg.optim.max_grad_norm
        params = self.master.masters if self.master else self.params
        grads = [p.grad for p in params if p.grad is not None]
        if not grads:
            return 0.0
        # FSDP full fine-tuning mixes sharded (DTensor) gradients with the unsharded head's: one norm per kind.
        sharded = [g for g in grads if hasattr(g, "full_tensor")]
        parts = [local_tensor(torch.nn.utils.get_total_norm(g)).float().to(grads[0].device)
                 for g in (sharded, [g for g in grads if not hasattr(g, "full_tensor")]) if g]
        total = torch.stack(parts).norm()
        if max_norm > 0:
            coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
            for g in grads:
                g.mul_(coef.to(g.dtype))
        return float(total)

    # -- helpers for tests and the benchmark -----------------------------------

    @torch.no_grad()
    def sample_logprobs(self, batch: Batch) -> list[torch.Tensor]:
        """Current per-token logprobs of each sample (0 at its first token) at the run's temperature, fp32 on CPU."""
        self.model.eval()
        out = []
        off = batch.sample_offsets.tolist()
        for i in range(batch.num_samples):
            mb = make_micro_batch(batch, [i], self.device)
            logits = self.model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits
            lp = torch.log_softmax(logits[0, :-1].float() / self.cfg.loss.temperature, -1).gather(-1, mb.input_ids[0, 1:, None])[:, 0]
            out.append(torch.cat([lp.new_zeros(1), lp]).cpu())
            assert out[-1].numel() == off[i + 1] - off[i]
        return out
