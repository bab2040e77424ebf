"""Chunked logprobs from hidden states equal the full-logits path on the CPU.

Bit for bit when a chunk holds all the selected rows (any dtype) and for bf16 at
any chunk size; fp32 chunks of a few rows differ in the last bits only, because
the CPU's fp32 matmul picks another reduction order for small row counts.
"""

import pytest
import torch
import torch.nn.functional as F

from helpers import make_cfg, make_samples
from ratchet_trainer.core import Trainer, write_batch
from ratchet_trainer.core.batch import load_batch
from ratchet_trainer.core.logprobs import HeadInput, logprobs_from_hidden, logprobs_from_logits, token_logprobs

H, V = 16, 37


def _inputs(dtype=torch.float32, B=2, L=23, seed=0):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(B, L, H, generator=g).to(dtype).requires_grad_(True)
    weight = (torch.randn(V, H, generator=g) * 0.5).to(dtype)
    ids = torch.randint(0, V, (B, L), generator=g)
    sel = torch.rand(B, L - 1, generator=g) > 0.3
    return hidden, weight, ids, sel


def _full(hidden, weight, ids, sel, temperature=1.0):
    logits = F.linear(hidden, weight)  # what the model's lm_head does
    return logprobs_from_logits(logits, ids, sel, temperature)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 5, 1024])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_chunked_equals_full_logits(dtype, chunk, temperature):
    h1, w, ids, sel = _inputs(dtype)
    exact = dtype == torch.bfloat16 or chunk >= int(sel.sum())

    def same(a, b):
        if exact:
            assert torch.equal(a, b)
        else:
            torch.testing.assert_close(a, b, rtol=2e-6, atol=2e-6)

    h2 = h1.detach().clone().requires_grad_(True)
    lp_full, ent_full = _full(h1, w, ids, sel, temperature)
    lp_chunk, ent_chunk = logprobs_from_hidden(HeadInput(h2, w, chunk_tokens=chunk), ids, sel, temperature)
    assert lp_chunk.dtype == torch.float32 and lp_chunk.shape == lp_full.shape
    same(lp_full, lp_chunk)
    same(ent_full, ent_chunk)
    g = torch.randn(lp_full.shape, generator=torch.Generator().manual_seed(3))
    (lp_full * g).sum().backward()
    (lp_chunk * g).sum().backward()
    same(h1.grad, h2.grad)
    # Positions that are not selected get exactly zero gradient.
    unselected = ~torch.cat([sel, torch.zeros(sel.shape[0], 1, dtype=torch.bool)], 1)
    assert bool((h2.grad[unselected] == 0).all())


def test_chunked_weight_gradient_matches_full():
    """Full fine-tuning trains the output projection too: its gradient (summed over chunks) matches."""
    h1, w, ids, sel = _inputs()
    w1, w2 = w.clone().requires_grad_(True), w.clone().requires_grad_(True)
    b1, b2 = torch.zeros(V, requires_grad=True), torch.zeros(V, requires_grad=True)
    lp_full, _ = logprobs_from_logits(F.linear(h1, w1, b1), ids, sel)
    lp_chunk, _ = logprobs_from_hidden(HeadInput(h1.detach().clone().requires_grad_(True), w2, b2, chunk_tokens=4), ids, sel)
    lp_full.sum().backward()
    lp_chunk.sum().backward()
    torch.testing.assert_close(w1.grad, w2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(b1.grad, b2.grad, rtol=1e-5, atol=1e-6)


def test_temperature_divides_the_logits():
    h, w, ids, sel = _inputs()
    lp, ent = token_logprobs(HeadInput(h, w), ids, sel, temperature=0.5)
    ref = torch.log_softmax(F.linear(h, w)[:, :-1][sel].float() / 0.5, -1).gather(-1, ids[:, 1:][sel][:, None])[:, 0]
    torch.testing.assert_close(lp, ref, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        token_logprobs(HeadInput(h, w), ids, sel, temperature=0.0)


def test_trainer_step_same_with_and_without_full_logits(tmp_path):
    """The whole step (tiny Llama, LoRA): chunked logprobs (the default chunk, which holds every
    trainable token here) give the full-logits path's metrics and update, bit for bit."""
    results = []
    for chunk in (0, 1024):
        tr = Trainer("run", make_cfg("tiny", logprob_chunk_tokens=chunk))
        assert tr.logprob_chunk_tokens == chunk
        b, m = write_batch(tmp_path, f"b{chunk}", make_samples(tr.vocab_size),
                           {"run_id": "run", "step": 0, "vocab_size": tr.vocab_size})
        out = tr.step(0, load_batch(b, m))
        results.append((out, {k: v.detach().clone() for k, v in tr.trainable_state().items()}))
    (a, sa), (b, sb) = results
    for k in ("loss", "entropy", "grad_norm", "clip_frac", "ratio_abs_dev"):
        assert a[k] == b[k], k
    assert sa.keys() == sb.keys()
    for k in sa:
        assert torch.equal(sa[k], sb[k]), k
