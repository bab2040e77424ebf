"""The training core: one model, its optimiser, and the ledger of applied steps.

No Temporal here: the worker wraps this, the benchmark and tests drive it directly.
A step is applied at most once per (run, step): the ledger records each applied
step's metrics, and a re-delivered step returns them with applied=False.
"""

from __future__ import annotations

import logging
import time
from typing import Any, Callable

import torch

from .batch import (Batch, BatchError, MicroBatch, check_batch_fits, make_micro_batch, make_packed_micro_batch,
                    plan_micro_batches, plan_packed_micro_batches)
from .config import TrainerConfig
from .loss import LossStats, Normalizer, micro_batch_loss
from .model import build_model, resolve_device, vocab_size

log = logging.getLogger(__name__)

Heartbeat = Callable[[dict[str, Any]], None]


class StepOrderError(ValueError):
    """A step older than the newest applied one that is not in the ledger: it can never be applied."""


def step_seed(seed: int, step: int) -> int:
    # Each step draws its randomness (LoRA dropout) from (seed, step) alone, so a
    # step replayed on a fresh worker after a crash computes the same update.
    return (seed * 1_000_003 + step) % (2**63 - 1)


class Trainer:
    def __init__(self, run_id: str, cfg: TrainerConfig, device: torch.device | None = None,
                 model: torch.nn.Module | None = None):
        """`model`, if given, is already built for cfg (the benchmark reuses one base model)."""
        self.run_id = run_id
        self.cfg = cfg
        self.device = device or resolve_device(cfg)
        self.packing = cfg.packing if isinstance(cfg.packing, bool) else self.device.type == "cuda"
        self.model = model if model is not None else build_model(cfg, self.device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        o = cfg.optim
        self.optimizer = torch.optim.AdamW(
            self.params, lr=o.lr, betas=o.betas, eps=o.eps, weight_decay=o.weight_decay,
            fused=self.device.type == "cuda",
        )
        self.ref_model = None
        if cfg.loss.kl_coef > 0 and cfg.model.lora is None:
            # Full fine-tuning has no adapter to switch off: keep a frozen copy.
            import copy

            self.ref_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.ledger: dict[int, dict[str, Any]] = {}
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

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """The tensors a checkpoint must hold: the adapter, or all weights for full fine-tuning."""
        if self.cfg.model.lora is not None:
            from peft import get_peft_model_state_dict

            return get_peft_model_state_dict(self.model)
        return self.model.state_dict()

    # -- one optimiser step ----------------------------------------------------

    def step(self, step: int, batch: Batch, heartbeat: Heartbeat | None = None) -> dict[str, Any]:
        if step in self.ledger:
            log.info("step already applied; returning recorded metrics", extra={"run_id": self.run_id, "step": step})
            return {**self.ledger[step], "applied": False}
        if step < self.last_step:
            raise StepOrderError(
                f"run {self.run_id}: step {step} is older than the newest applied step {self.last_step} and was never "
                "applied; steps apply in order. Fix: resume from a checkpoint taken before this step"
            )
        check_batch_fits(batch, self.vocab_size, self.cfg.seq_len, run_id=self.run_id, step=step)
        t0 = time.monotonic()
        torch.manual_seed(step_seed(self.cfg.seed, step))
        if self.device.type == "cuda":
            torch.cuda.manual_seed(step_seed(self.cfg.seed, step))

        lengths = batch.sample_lengths()
        plan = plan_packed_micro_batches if self.packing else plan_micro_batches
        groups = plan(lengths, self.cfg.micro_batch_tokens)
        forward_tokens = 0
        tps = torch.zeros(batch.num_samples, dtype=torch.long)
        off = batch.sample_offsets
        for i in range(batch.num_samples):
            tps[i] = batch.loss_mask[off[i] : off[i + 1]].sum()
        total = int(tps.sum())
        if total == 0:
            raise BatchError(f"batch for step {step} has no trainable tokens (loss_mask is all 0). "
                             "Fix: check the batch builder's masking")
        norm = Normalizer(total_tokens=total, num_samples=int((tps > 0).sum()), tokens_per_sample=tps,
                          max_tokens=self.cfg.loss.max_tokens or self.cfg.seq_len)
        stats = LossStats()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        if heartbeat is not None:
            heartbeat({"step": step, "micro_batch": 0, "micro_batches": len(groups)})
        try:
            for k, ids in enumerate(groups):
                mb = self._micro_batch(batch, ids)
                forward_tokens += mb.input_ids.numel()
                ref_logits = self._ref_logits(mb) if self.cfg.loss.kl_coef > 0 else None
                logits = self.model(**self._forward_args(mb)).logits
                loss = micro_batch_loss(logits, mb, self.cfg.loss, norm, stats, ref_logits)
                loss.backward()
                del logits, loss, ref_logits
                if heartbeat is not None:
                    heartbeat({"step": step, "micro_batch": k + 1, "micro_batches": len(groups)})
            grad_norm = self._clip_grads()
            if not torch.isfinite(torch.tensor(grad_norm)):
                raise FloatingPointError(f"step {step}: gradient norm is {grad_norm}; the update was skipped")
            self.optimizer.step()
        finally:
            # Whatever happened, no half-accumulated gradient survives into the next step.
            self.optimizer.zero_grad(set_to_none=True)

        metrics = stats.metrics(self.cfg.loss.type)
        metrics.update(
            step=step, grad_norm=grad_norm, tokens=total, total_tokens=int(batch.input_ids.numel()),
            samples=batch.num_samples, micro_batches=len(groups), lr=self.cfg.optim.lr,
            padding_frac=1.0 - int(batch.input_ids.numel()) / max(forward_tokens, 1),
            mismatch_exceeded=metrics["ratio_abs_dev"] > self.cfg.loss.mismatch_tolerance,
            duration_s=time.monotonic() - t0,
        )
        if metrics["mismatch_exceeded"]:
            log.warning("inference/trainer logprob mismatch above tolerance",
                        extra={"step": step, "ratio_abs_dev": metrics["ratio_abs_dev"],
                               "tolerance": self.cfg.loss.mismatch_tolerance})
        self.ledger[step] = metrics
        metrics = {**metrics, "policy_version": self.policy_version}
        self.ledger[step] = metrics
        log.info("step applied", extra={"run_id": self.run_id, **metrics})
        return {**metrics, "applied": True}

    def _micro_batch(self, batch: Batch, sample_ids: list[int]) -> MicroBatch:
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

    def _ref_logits(self, mb: MicroBatch) -> torch.Tensor:
        with torch.no_grad():
            kw = self._forward_args(mb)
            if self.ref_model is not None:
                return self.ref_model(**kw).logits
            with self.model.disable_adapter():
                return self.model(**kw).logits

    def _clip_grads(self) -> float:
        max_norm = self.cfg.optim.max_grad_norm
        if max_norm > 0:
            return float(torch.nn.utils.clip_grad_norm_(self.params, max_norm))
        grads = [p.grad.detach().float().norm() for p in self.params if p.grad is not None]
        return float(torch.stack(grads).norm()) if grads else 0.0

    # -- helpers for tests and the benchmark -----------------------------------

    @torch.no_grad()
    def sample_logprobs(self, batch: Batch) -> list[torch.Tensor]:
        """Current per-token logprobs of each sample (0 at its first token), in fp32 on CPU."""
        self.model.eval()
        out = []
        off = batch.sample_offsets.tolist()
        for i in range(batch.num_samples):
            mb = make_micro_batch(batch, [i], self.device)
            logits = self.model(input_ids=mb.input_ids, position_ids=mb.position_ids, use_cache=False).logits
            lp = torch.log_softmax(logits[0, :-1].float(), -1).gather(-1, mb.input_ids[0, 1:, None])[:, 0]
            out.append(torch.cat([lp.new_zeros(1), lp]).cpu())
            assert out[-1].numel() == off[i + 1] - off[i]
        self.model.train()
        return out
