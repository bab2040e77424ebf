"""Policy-gradient losses of the GRPO family, on trainable tokens only.

All normalisers are global over the whole batch (not per micro-batch), so the
sum of the micro-batches' gradients equals the full batch's gradient whatever
the token budget. Token t's logprob predicts input_ids[t] from logits[t-1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from .batch import Batch, MicroBatch
from .config import LossConfig
from .logprobs import HeadInput, token_logprobs


# Behaviour logprobs at or below this carry no probability: vLLM floors the
# logprob of a token its processors ruled out at -9999 (and -inf / NaN can reach
# us through JSON). No ratio can be formed against them, so such tokens are masked.
LOGPROB_FLOOR = -1000.0


@dataclass
class Normalizer:
    """Batch-wide counts the loss weights come from.

    The unit of weight is the trajectory, not the sample: a trajectory whose chat
    template broke the multi-turn prefix arrives as several samples (segments), and
    it must weigh the same however it was split.
    """

    total_tokens: int  # trainable tokens in the batch
    num_samples: int  # samples with at least one trainable token
    tokens_per_sample: torch.Tensor  # [S] trainable tokens of each sample
    max_tokens: int  # Dr. GRPO's constant
    sample_trajectory: torch.Tensor | None = None  # [S] trajectory of each sample; None: one per sample
    tokens_per_trajectory: torch.Tensor = field(init=False)  # [K]
    num_trajectories: int = field(init=False)  # trajectories with at least one trainable token

    def __post_init__(self) -> None:
        S = int(self.tokens_per_sample.numel())
        if self.sample_trajectory is None:
            self.sample_trajectory = torch.arange(S, dtype=torch.long)
        K = int(self.sample_trajectory.max()) + 1 if S else 0
        self.tokens_per_trajectory = torch.zeros(K, dtype=torch.long).index_add(
            0, self.sample_trajectory.long(), self.tokens_per_sample.long())
        self.num_trajectories = int((self.tokens_per_trajectory > 0).sum())

    @classmethod
    def for_batch(cls, batch: Batch, max_tokens: int) -> "Normalizer":
        off = batch.sample_offsets
        tps = torch.tensor([int(batch.loss_mask[off[i]: off[i + 1]].sum()) for i in range(batch.num_samples)],
                           dtype=torch.long)
        return cls(total_tokens=int(tps.sum()), num_samples=int((tps > 0).sum()), tokens_per_sample=tps,
                   max_tokens=max_tokens, sample_trajectory=batch.trajectories())


@dataclass
class LossStats:
    """Sums over micro-batches, turned into means once the step is done."""

    loss: float = 0.0
    tokens: int = 0
    entropy_sum: float = 0.0
    clipped: int = 0
    abs_ratio_dev_sum: float = 0.0
    mismatch_k3_sum: float = 0.0
    ratio_max: float = 0.0
    kl_ref_sum: float = 0.0
    seq_clipped: int = 0
    seqs: int = 0
    dual_clipped: int = 0  # tokens (gspo: trajectories) whose objective the dual clip bounded
    policy_dev_sum: float = 0.0  # sum of |ratio - 1| of the ratio the clips act on, over kept tokens
    updates: int = 1  # optimiser updates these stats sum over
    # Train/inference mismatch, over tokens whose behaviour logprob is usable.
    mismatch_tokens: int = 0
    abs_delta_sum: float = 0.0
    abs_delta_max: float = 0.0
    masked: int = 0  # tokens dropped from the loss (floor logprob, or |delta| over the mask threshold)
    floor: int = 0  # of those, behaviour logprobs at the floor or not finite
    capped: int = 0  # tokens whose importance weight hit tis_cap
    extra: dict = field(default_factory=dict)

    def metrics(self, loss_type: str) -> dict[str, float]:
        n = max(self.tokens, 1)
        gspo = loss_type == "gspo"
        out = {
            "loss": self.loss / max(self.updates, 1),  # mean over updates of each update's loss
            "entropy": self.entropy_sum / n,
            # The PPO/GSPO clip: tokens (gspo: trajectories) whose clipped objective was the smaller.
            "clip_frac": (self.seq_clipped / max(self.seqs, 1)) if gspo else self.clipped / n,
            "dual_clip_frac": self.dual_clipped / (max(self.seqs, 1) if gspo else n),
            # mean |r - 1| of the ratio the clips act on (current/proximal under tis and icepop,
            # current/behaviour under mask and none): how far the policy moved from it.
            "policy_ratio_abs_dev": self.policy_dev_sum / n,
            "mismatch_kl": self.mismatch_k3_sum / n,
            "ratio_abs_dev": self.abs_ratio_dev_sum / n,
            "ratio_max": self.ratio_max,
            "kl_ref": self.kl_ref_sum / n,
            # |logprob_trainer - logprob_vllm| on the sampled tokens, and what the correction did.
            "mismatch_abs_mean": self.abs_delta_sum / max(self.mismatch_tokens, 1),
            "mismatch_abs_max": self.abs_delta_max,
            "mismatch_masked_frac": self.masked / n,
            "mismatch_capped_frac": self.capped / n,
            "floor_logprobs": self.floor,
        }
        if loss_type == "sft":  # mean negative log-likelihood per trained token
            out["nll"] = self.extra.get("nll_sum", 0.0) / n
        return out


def _dual_clip(obj: torch.Tensor, adv: torch.Tensor, c: float) -> torch.Tensor:
    """Bound a negative advantage's objective below by c * A: beyond it the gradient is 0, never unbounded."""
    if c <= 0:
        return obj
    return torch.where(adv < 0, torch.maximum(obj, c * adv), obj)


def _dual_clipped(obj: torch.Tensor, adv: torch.Tensor, c: float) -> torch.Tensor:
    """Where the dual clip binds: a negative advantage whose clipped objective is below c * A."""
    if c <= 0:
        return torch.zeros_like(adv, dtype=torch.bool)
    return (adv < 0) & (obj < c * adv)


def _sft_loss(logp: torch.Tensor, ent: torch.Tensor, mb: MicroBatch, sel: torch.Tensor, cfg: LossConfig,
              norm: Normalizer, stats: LossStats) -> torch.Tensor:
    """Supervised fine-tuning: the negative log-likelihood of the loss mask's tokens.

    The mask is the same one RL trains on (the policy's own tokens; prompts and tool
    outputs carry none), so SFT on a demonstration teaches exactly what the policy
    would have had to generate. Advantages and behaviour logprobs are not read: a
    scripted demonstration has no sampler. The normaliser is the run's
    (`token`: mean over the batch's trainable tokens; `sequence`: mean per
    trajectory, then over trajectories; `dr_grpo`: sum / (trajectories x max_tokens)),
    global over the batch as for the policy-gradient losses.
    """
    sample_idx = mb.sample_index[:, 1:][sel]
    assert norm.sample_trajectory is not None
    traj_idx = norm.sample_trajectory.to(sel.device)[sample_idx]
    K = max(norm.num_trajectories, 1)
    if cfg.normalization == "token":
        w = torch.full_like(logp, 1.0 / max(norm.total_tokens, 1))
    elif cfg.normalization == "dr_grpo":
        w = torch.full_like(logp, 1.0 / (K * norm.max_tokens))
    else:
        w = 1.0 / (K * norm.tokens_per_trajectory.to(sel.device)[traj_idx].float())
    loss = -(logp * w).sum()
    with torch.no_grad():
        stats.tokens += int(sel.sum())
        stats.entropy_sum += float(ent.sum())
        stats.loss += float(loss.detach())
        stats.extra["nll_sum"] = stats.extra.get("nll_sum", 0.0) + float(-logp.detach().sum())
    return loss


def micro_batch_loss(
    out: torch.Tensor | HeadInput,
    mb: MicroBatch,
    cfg: LossConfig,
    norm: Normalizer,
    stats: LossStats,
    ref_out: torch.Tensor | HeadInput | None = None,
    temperature: float | None = None,
) -> torch.Tensor:
    """This micro-batch's share of the batch loss (call backward on it); updates stats.

    `out` is the model's logits [B, L, V] or its last hidden states with the
    output projection (HeadInput: logprobs chunked, no [tokens x vocab] logits);
    `temperature` (default: cfg.temperature, the run's sampling temperature)
    divides the logits as the sampler did (logprobs.py).

    Three policies: behaviour (vLLM's logprobs, `mb.inference_logprobs`), proximal
    (the trainer's policy before the batch's first update: `mb.proximal_logprobs`,
    or, when the batch gets one update, the current policy's own logprobs detached,
    which is the same policy) and current (`out`).

    - `tis` and `icepop` are decoupled (AReaL): the PPO/GSPO ratio is current /
      proximal, and the behaviour-to-proximal gap is an importance weight,
      min(pi_prox / pi_vllm, tis_cap) (tis) or pi_prox / pi_vllm with the token
      dropped when that is outside [icepop_low, icepop_high] (icepop). With one
      update the ratio is 1: only the weight acts, never the clips.
    - `mask` and `none` ratio against vLLM's logprobs (the clips act between
      current and behaviour); `mask` drops tokens with |log pi_prox - log pi_vllm|
      over the threshold.

    In every mode a floor/non-finite behaviour logprob masks its token, and the
    dual clip bounds negative advantages' objective (where the ratio can move).
    """
    temperature = cfg.temperature if temperature is None else temperature
    sel = mb.loss_mask[:, 1:]
    if not bool(sel.any()):
        t = out.hidden if isinstance(out, HeadInput) else out
        return t.sum() * 0.0  # keeps the graph connected; contributes nothing
    logp, ent = token_logprobs(out, mb.input_ids, sel, temperature)
    if cfg.kind == "sft":
        return _sft_loss(logp, ent, mb, sel, cfg, norm, stats)
    inf_lp = mb.inference_logprobs[:, 1:][sel]
    adv = mb.advantages[:, 1:][sel]
    # The trajectory each selected token belongs to (rows are samples when padded,
    # several samples share a row when packed; a trajectory may be several samples).
    sample_idx = mb.sample_index[:, 1:][sel]
    assert norm.sample_trajectory is not None
    traj_idx = norm.sample_trajectory.to(sel.device)[sample_idx]
    present, local = torch.unique(traj_idx, return_inverse=True)
    B = int(present.numel())
    n_i = norm.tokens_per_trajectory.to(sel.device)[traj_idx].float()
    K = max(norm.num_trajectories, 1)

    lp_d = logp.detach()
    # One update per batch: the proximal policy is the current one (no second forward).
    prox = mb.proximal_logprobs[:, 1:][sel] if mb.proximal_logprobs is not None else lp_d
    decoupled = cfg.correction in ("tis", "icepop")
    usable = torch.isfinite(inf_lp) & (inf_lp > LOGPROB_FLOOR)
    behaviour = torch.where(usable, inf_lp, prox)  # unusable: treated as agreeing, and masked below
    delta = prox - behaviour  # log pi_proximal - log pi_vllm, 0 where unusable
    keep = usable
    if cfg.correction == "mask":
        keep = keep & (delta.abs() <= cfg.mask_threshold)
    elif cfg.correction == "icepop":
        keep = keep & (delta >= math.log(cfg.icepop_low)) & (delta <= math.log(cfg.icepop_high))
    keepf = keep.float()
    # A masked token's log-ratio is a constant 0: no gradient, and nothing overflows.
    old = prox if decoupled else behaviour
    log_ratio = torch.where(keep, logp - old, torch.zeros_like(logp))
    lo, hi = cfg.clip_range()
    lo, hi = 1.0 - lo, 1.0 + hi
    capped = torch.zeros_like(keep)

    if cfg.kind == "gspo":
        # Sequence-level ratio over the whole trajectory: exp of the mean log-ratio of its kept tokens
        # (a trajectory's segments share this micro-batch, so the counts here are the trajectory's).
        n_kept = torch.zeros(B, device=sel.device).index_add(0, local, keepf)[local].clamp(min=1.0)
        seq_lr = torch.zeros(B, device=sel.device, dtype=logp.dtype).index_add(0, local, log_ratio / n_kept)
        seq_adv = torch.zeros(B, device=sel.device).index_add(0, local, adv * keepf / n_kept)
        s = torch.exp(seq_lr)
        a = seq_adv
        unclipped, clipped = s * a, torch.clamp(s, lo, hi) * a
        obj = _dual_clip(torch.minimum(unclipped, clipped), a, cfg.dual_clip)
        seq_dual = _dual_clipped(torch.minimum(unclipped, clipped).detach(), a, cfg.dual_clip)
        seq_w = torch.ones(B, device=sel.device)
        if decoupled:
            seq_delta = torch.zeros(B, device=sel.device).index_add(0, local, delta * keepf / n_kept)
            if cfg.correction == "tis":
                seq_w = torch.exp(seq_delta.clamp(max=math.log(cfg.tis_cap)))
                capped = (seq_delta > math.log(cfg.tis_cap))[local] & keep
            else:  # icepop: every kept token's weight is within the bounds, so is their mean
                seq_w = torch.exp(seq_delta)
        # A trajectory whose every token is masked contributes nothing.
        seq_keep = torch.zeros(B, device=sel.device).index_add(0, local, keepf) > 0
        loss = -(obj * seq_w * seq_keep.float()).sum() / K
        stats.seq_clipped += int((clipped < unclipped).sum())
        stats.seqs += B
        stats.dual_clipped += int(seq_dual.sum())
        stats.policy_dev_sum += float(((s.detach() - 1.0).abs()[local] * keepf).sum())
        w = 1.0 / (K * n_i)  # for the KL term: per-trajectory mean
    else:
        ratio = torch.exp(log_ratio)
        unclipped, clipped = ratio * adv, torch.clamp(ratio, lo, hi) * adv
        obj = _dual_clip(torch.minimum(unclipped, clipped), adv, cfg.dual_clip)
        tok_dual = _dual_clipped(torch.minimum(unclipped, clipped).detach(), adv, cfg.dual_clip)
        is_w = torch.ones_like(obj)
        if cfg.correction == "tis":
            is_w = torch.exp(delta.clamp(max=math.log(cfg.tis_cap)))
            capped = (delta > math.log(cfg.tis_cap)) & keep
        elif cfg.correction == "icepop":
            is_w = torch.exp(torch.where(keep, delta, torch.zeros_like(delta)))  # dropped tokens: 0 below
        per_tok = -obj * is_w * keepf
        if cfg.normalization == "token":
            w = torch.full_like(per_tok, 1.0 / norm.total_tokens)
        elif cfg.normalization == "dr_grpo":
            w = torch.full_like(per_tok, 1.0 / (K * norm.max_tokens))
        else:  # sequence: mean per trajectory, then over trajectories
            w = 1.0 / (K * n_i)
        loss = (per_tok * w).sum()
        stats.clipped += int(((clipped < unclipped) & keep).sum())
        stats.dual_clipped += int((tok_dual & keep).sum())
        stats.policy_dev_sum += float(((ratio.detach() - 1.0).abs() * keepf).sum())

    if ref_out is not None and cfg.kl_coef > 0:
        ref_lp, _ = token_logprobs(ref_out, mb.input_ids, sel, temperature)
        d = ref_lp - logp
        # k3 = r - log r - 1 (r = pi_ref / pi) is an unbiased, non-negative estimate of KL(pi || ref)
        # on tokens sampled from pi, but its gradient is (1 - r) grad log pi, whose expectation is
        # the gradient of KL(ref || pi), the other direction. k2 = d^2 / 2 has gradient
        # (log pi - log pi_ref) grad log pi, whose expectation is the gradient of KL(pi || ref).
        # The term takes k3's value (what kl_ref reports) and k2's gradient.
        k3 = torch.exp(d) - d - 1.0
        k2 = 0.5 * d * d
        kl = k3.detach() + (k2 - k2.detach())
        loss = loss + cfg.kl_coef * (kl * w).sum()
        stats.kl_ref_sum += float(k3.detach().sum())

    with torch.no_grad():
        r = torch.exp(delta)
        stats.tokens += int(sel.sum())
        stats.entropy_sum += float(ent.sum())
        stats.abs_ratio_dev_sum += float((r - 1.0).abs().sum())
        # k3 estimate of KL(pi_inference || pi_trainer) on the sampled tokens.
        stats.mismatch_k3_sum += float(((r - 1.0) - delta).sum())
        dmax = float(delta.max())
        stats.ratio_max = max(stats.ratio_max, math.exp(min(dmax, 700.0)))  # finite: it goes into JSON
        n_usable = int(usable.sum())
        stats.mismatch_tokens += n_usable
        if n_usable:
            stats.abs_delta_sum += float(delta[usable].abs().sum())
            stats.abs_delta_max = max(stats.abs_delta_max, float(delta[usable].abs().max()))
        stats.masked += int((~keep).sum())
        stats.floor += int((~usable).sum())
        stats.capped += int(capped.sum())
        stats.loss += float(loss.detach())
    return loss
