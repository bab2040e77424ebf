"""Token logprobs (and entropies) of the sampled tokens, from logits or from the last hidden states.

Where logits become logprobs, in one place. Token t's logprob predicts
input_ids[t] from position t-1. Every entry point takes `temperature`, the
divisor the sampler applied to the logits (1.0 = none), so the trainer scores
the distribution the tokens were actually drawn from.

Two sources:
- a logits tensor [B, L, V] (the model's full output): only the selected rows
  are upcast to fp32 (today's path; tests and the reference model use it);
- `HeadInput` (the last hidden states [B, L, H] and the output projection):
  the [tokens x vocab] logits are never materialised. The selected positions
  are projected `chunk_tokens` rows at a time; forward keeps only each row's
  logprob and entropy, backward recomputes each chunk's logits (one more
  projection matmul, ~2% of an 8B model's FLOPs) and frees them before the
  next. Peak extra memory is one chunk's fp32 logits and their gradient
  instead of every token's (Qwen3's 151,936-entry vocabulary: 8k tokens cost
  ~5 GiB of fp32 logits, plus as much again for their gradient).

Both give the same numbers: each chunk runs the very ops of the full path on
its rows (`F.linear`, then `.float()`, `/ temperature`, cross-entropy), and
the backward replays them through autograd (tested bit-exact on the CPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

DEFAULT_CHUNK_TOKENS = 1024


@dataclass
class HeadInput:
    """What the output projection would turn into logits: hidden states and its weights."""

    hidden: torch.Tensor  # [B, L, H], the decoder's output after the final norm
    weight: torch.Tensor  # [V, H]
    bias: torch.Tensor | None = None
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS


def _check_temperature(temperature: float) -> None:
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (the sampler's logit divisor), got {temperature!r}")


def _logprob_and_entropy(rows: torch.Tensor, tgt: torch.Tensor, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """rows: fp32 logits [N, V]. Logprob of tgt (differentiable) and entropy (detached)."""
    z = rows / temperature if temperature != 1.0 else rows
    logp = -F.cross_entropy(z, tgt, reduction="none")
    with torch.no_grad():
        lsm = torch.log_softmax(z.detach(), dim=-1)
        ent = -(lsm.exp() * lsm).sum(-1)
    return logp, ent


def logprobs_from_logits(logits: torch.Tensor, input_ids: torch.Tensor, sel: torch.Tensor,
                         temperature: float = 1.0, chunk_tokens: int = DEFAULT_CHUNK_TOKENS
                         ) -> tuple[torch.Tensor, torch.Tensor]:
    """From full logits [B, L, V]: (logprobs [N] fp32, entropies [N] fp32, detached) at sel [B, L-1]."""
    _check_temperature(temperature)
    rows = logits[:, :-1, :][sel].float()  # [N, V]: only trainable positions are upcast
    tgt = input_ids[:, 1:][sel]
    z = rows / temperature if temperature != 1.0 else rows
    logp = -F.cross_entropy(z, tgt, reduction="none")
    with torch.no_grad():  # entropy in chunks: a second [N, V] fp32 buffer is what we avoid
        ents = []
        for i in range(0, z.shape[0], chunk_tokens):
            lsm = torch.log_softmax(z[i : i + chunk_tokens].detach(), dim=-1)
            ents.append(-(lsm.exp() * lsm).sum(-1))
        ent = torch.cat(ents) if ents else z.new_zeros(0)
    return logp, ent


class _ChunkedHeadLogprobs(torch.autograd.Function):
    """Logprobs of targets under softmax((h @ W.T + b).float() / T), chunk by chunk, logits never kept."""

    @staticmethod
    def forward(ctx, h, weight, bias, tgt, temperature, chunk):  # type: ignore[override]
        n = h.shape[0]
        logp = torch.empty(n, dtype=torch.float32, device=h.device)
        ent = torch.empty(n, dtype=torch.float32, device=h.device)
        with torch.no_grad():
            for i in range(0, n, chunk):
                rows = F.linear(h[i : i + chunk], weight, bias).float()
                lp, e = _logprob_and_entropy(rows, tgt[i : i + chunk], temperature)
                logp[i : i + chunk] = lp
                ent[i : i + chunk] = e
                del rows
        ctx.save_for_backward(h, weight, bias, tgt)
        ctx.temperature, ctx.chunk = temperature, chunk
        ctx.mark_non_differentiable(ent)
        return logp, ent

    @staticmethod
    def backward(ctx, g_logp, _g_ent):  # type: ignore[override]
        h, weight, bias, tgt = ctx.saved_tensors
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        need_b = bias is not None and ctx.needs_input_grad[2]
        gh = torch.empty_like(h) if need_h else None
        w = weight.detach().requires_grad_(need_w)
        b = bias.detach().requires_grad_(need_b) if bias is not None else None
        gw = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        gb = torch.zeros_like(bias, dtype=torch.float32) if need_b else None
        for i in range(0, h.shape[0], ctx.chunk):
            hc = h[i : i + ctx.chunk].detach().requires_grad_(need_h)
            with torch.enable_grad():
                rows = F.linear(hc, w, b).float()
                z = rows / ctx.temperature if ctx.temperature != 1.0 else rows
                lp = -F.cross_entropy(z, tgt[i : i + ctx.chunk], reduction="none")
                wrt = [t for t, need in ((hc, need_h), (w, need_w), (b, need_b)) if need]
                grads = list(torch.autograd.grad(lp, wrt, g_logp[i : i + ctx.chunk]))
            if need_h:
                gh[i : i + ctx.chunk] = grads.pop(0)
            if need_w:
                gw += grads.pop(0)
            if need_b:
                gb += grads.pop(0)
        return (gh, gw.to(weight.dtype) if need_w else None, gb.to(bias.dtype) if need_b else None, None, None, None)


def logprobs_from_hidden(head: HeadInput, input_ids: torch.Tensor, sel: torch.Tensor,
                         temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """From hidden states, chunked: (logprobs [N] fp32, entropies [N] fp32, detached) at sel [B, L-1]."""
    _check_temperature(temperature)
    if head.chunk_tokens < 1:
        raise ValueError(f"HeadInput.chunk_tokens must be >= 1, got {head.chunk_tokens}")
    h = head.hidden[:, :-1, :][sel]  # [N, H]
    tgt = input_ids[:, 1:][sel]
    return _ChunkedHeadLogprobs.apply(h, head.weight, head.bias, tgt, float(temperature), int(head.chunk_tokens))


def token_logprobs(out: torch.Tensor | HeadInput, input_ids: torch.Tensor, sel: torch.Tensor,
                   temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Logprobs and entropies of the selected target tokens, from logits or a HeadInput."""
    if isinstance(out, HeadInput):
        return logprobs_from_hidden(out, input_ids, sel, temperature)
    return logprobs_from_logits(out, input_ids, sel, temperature)
