"""Policy-gradient losses of the GRPO family, on trainable tokens only.

All normalisers are global over the whole batch (not per micro-batch), so the
sum of the micro-batches' gradients equals the full batch's gradient whatever
the token budget. Token t's logprob predicts input_ids[t] from logits[t-1].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .batch import MicroBatch
from .config import LossConfig
from .logprobs import HeadInput, token_logprobs


@dataclass
class Normalizer:
    """Batch-wide counts the loss weights come from."""

    total_tokens: int  # trainable tokens in the batch
    num_samples: int  # samples with at least one trainable token
    tokens_per_sample: torch.Tensor  # [S] trainable tokens of each sample
    max_tokens: int  # Dr. GRPO's constant


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
    extra: dict = field(default_factory=dict)

    def metrics(self, loss_type: str) -> dict[str, float]:
        n = max(self.tokens, 1)
        out = {
            "loss": self.loss,
            "entropy": self.entropy_sum / n,
            "clip_frac": (self.seq_clipped / max(self.seqs, 1)) if loss_type == "gspo" else self.clipped / n,
            "mismatch_kl": self.mismatch_k3_sum / n,
            "ratio_abs_dev": self.abs_ratio_dev_sum / n,
            "ratio_max": self.ratio_max,
            "kl_ref": self.kl_ref_sum / n,
        }
        return out


def micro_batch_loss(
    out: torch.Tensor | HeadInput,
    mb: MicroBatch,
    cfg: LossConfig,
    norm: Normalizer,
    stats: LossStats,
    ref_out: torch.Tensor | HeadInput | None = None,
    temperature: float = 1.0,
) -> torch.Tensor:
    """This micro-batch's share of the batch loss (call backward on it); updates stats.

    `out` is the model's logits [B, L, V] or its last hidden states with the
    output projection (HeadInput: logprobs chunked, no [tokens x vocab] logits);
    `temperature` divides the logits as the sampler did (logprobs.py).
    """
    sel = mb.loss_mask[:, 1:]
    if not bool(sel.any()):
        t = out.hidden if isinstance(out, HeadInput) else out
        return t.sum() * 0.0  # keeps the graph connected; contributes nothing
    logp, ent = token_logprobs(out, mb.input_ids, sel, temperature)
    inf_lp = mb.inference_logprobs[:, 1:][sel]
    adv = mb.advantages[:, 1:][sel]
    # The sample each selected token belongs to (rows are samples when padded,
    # several samples share a row when packed).
    sample_idx = mb.sample_index[:, 1:][sel]
    present, local = torch.unique(sample_idx, return_inverse=True)
    B = int(present.numel())
    n_i = norm.tokens_per_sample.to(sel.device)[sample_idx].float()

    log_ratio = logp - inf_lp
    ratio = torch.exp(log_ratio)
    lo, hi = 1.0 - cfg.eps_low, 1.0 + cfg.eps_high

    if cfg.type == "gspo":
        # Sequence-level ratio: exp of the mean token log-ratio of each sample.
        seq_lr = torch.zeros(B, device=sel.device, dtype=logp.dtype).index_add(0, local, log_ratio / n_i)
        seq_adv = torch.zeros(B, device=sel.device).index_add(0, local, adv / n_i)
        s = torch.exp(seq_lr)
        a = seq_adv
        unclipped, clipped = s * a, torch.clamp(s, lo, hi) * a
        loss = -(torch.minimum(unclipped, clipped)).sum() / norm.num_samples
        stats.seq_clipped += int((clipped < unclipped).sum())
        stats.seqs += B
        w = 1.0 / (norm.num_samples * n_i)  # for the KL term: per-sample mean
    else:
        unclipped, clipped = ratio * adv, torch.clamp(ratio, lo, hi) * adv
        per_tok = -torch.minimum(unclipped, clipped)
        if cfg.normalization == "token":
            w = torch.full_like(per_tok, 1.0 / norm.total_tokens)
        elif cfg.normalization == "dr_grpo":
            w = torch.full_like(per_tok, 1.0 / (norm.num_samples * norm.max_tokens))
        else:  # sequence_mean
            w = 1.0 / (norm.num_samples * n_i)
        loss = (per_tok * w).sum()
        stats.clipped += int((clipped < unclipped).sum())

    if ref_out is not None and cfg.kl_coef > 0:
        ref_lp, _ = token_logprobs(ref_out, mb.input_ids, sel, temperature)
        d = ref_lp - logp
        k3 = torch.exp(d) - d - 1.0  # unbiased, non-negative estimate of KL(pi || ref)
        loss = loss + cfg.kl_coef * (k3 * w).sum()
        stats.kl_ref_sum += float(k3.detach().sum())

    with torch.no_grad():
        r = ratio.detach()
        stats.tokens += int(sel.sum())
        stats.entropy_sum += float(ent.sum())
        stats.abs_ratio_dev_sum += float((r - 1.0).abs().sum())
        # k3 estimate of KL(pi_inference || pi_trainer) on the sampled tokens.
        stats.mismatch_k3_sum += float(((r - 1.0) - log_ratio.detach()).sum())
        stats.ratio_max = max(stats.ratio_max, float(r.max()))
        stats.loss += float(loss.detach())
    return loss
