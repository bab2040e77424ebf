"""Loss-level tests on hand-made logits: masking, normalisation, clipping, micro-batch invariance."""

import math

import pytest
import torch

from ratchet_trainer.core.batch import (batch_from_tensors, make_micro_batch, make_packed_micro_batch, plan_micro_batches,
                                        plan_packed_micro_batches)
from ratchet_trainer.core.config import LossConfig
from ratchet_trainer.core.loss import LossStats, Normalizer, micro_batch_loss

V = 11


def _batch(lengths=(5, 7, 4), prompt=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = sum(lengths)
    mask = torch.zeros(T, dtype=torch.uint8)
    adv = torch.zeros(T)
    off = [0]
    pos = []
    for i, n in enumerate(lengths):
        s = off[-1]
        mask[s + prompt : s + n] = 1
        adv[s + prompt : s + n] = (1.0, -2.0, 0.5)[i % 3]
        pos += list(range(n))
        off.append(s + n)
    lp = torch.where(mask.bool(), -torch.rand(T, generator=g) * 3, torch.zeros(T))
    t = {"input_ids": torch.randint(0, V, (T,), generator=g, dtype=torch.int32),
         "position_ids": torch.tensor(pos, dtype=torch.int32), "loss_mask": mask, "advantages": adv,
         "inference_logprobs": lp.float(), "sample_offsets": torch.tensor(off, dtype=torch.int64)}
    return batch_from_tensors(t, {"format": "ratchet.batch/v1"})


def _norm(batch, max_tokens=16):
    off = batch.sample_offsets
    tps = torch.tensor([int(batch.loss_mask[off[i]:off[i + 1]].sum()) for i in range(batch.num_samples)])
    return Normalizer(int(tps.sum()), int((tps > 0).sum()), tps, max_tokens)


def _run(batch, cfg, groups, logits_per_sample, packed=False):
    norm, stats = _norm(batch), LossStats()
    total = 0.0
    for ids in groups:
        if packed:
            mb = make_packed_micro_batch(batch, ids, torch.device("cpu"))
            logits = torch.cat([logits_per_sample[i] for i in ids])[None]
        else:
            mb = make_micro_batch(batch, ids, torch.device("cpu"))
            L = mb.input_ids.shape[1]
            logits = torch.stack([torch.nn.functional.pad(logits_per_sample[i], (0, 0, 0, L - logits_per_sample[i].shape[0]))
                                  for i in ids])
        loss = micro_batch_loss(logits, mb, cfg, norm, stats)
        loss.backward()
        total += float(loss.detach())
    return total, stats


def _leaf_logits(batch, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(n, V, generator=g).requires_grad_(True) for n in batch.sample_lengths()]


@pytest.mark.parametrize("loss_type,norm", [("grpo", "token"), ("grpo", "dr_grpo"), ("grpo", "sequence_mean"), ("gspo", "token")])
def test_masked_positions_get_exactly_zero_gradient(loss_type, norm):
    batch = _batch()
    cfg = LossConfig(type=loss_type, normalization=norm, eps_low=1.0, eps_high=1e6)  # no clipping: every used row has gradient
    logits = _leaf_logits(batch)
    _run(batch, cfg, [[0, 1, 2]], logits)
    off = batch.sample_offsets.tolist()
    for i, lg in enumerate(logits):
        m = batch.loss_mask[off[i]:off[i + 1]]
        # logits[t-1] predicts token t: row t-1 is used iff token t is trainable.
        used = torch.zeros(lg.shape[0], dtype=torch.bool)
        used[:-1] = m[1:]
        assert torch.all(lg.grad[~used] == 0), "a masked position received gradient"
        assert lg.grad[used].abs().sum() > 0


def test_micro_batching_does_not_change_loss_or_gradient():
    batch = _batch(lengths=(5, 7, 4, 6, 3))
    cfg = LossConfig()
    a, b = _leaf_logits(batch), _leaf_logits(batch)
    la, _ = _run(batch, cfg, [list(range(5))], a)
    lb, _ = _run(batch, cfg, plan_micro_batches(batch.sample_lengths(), 8), b)
    assert len(plan_micro_batches(batch.sample_lengths(), 8)) > 2
    assert la == pytest.approx(lb, rel=1e-6)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad)


@pytest.mark.parametrize("loss_type,norm", [("grpo", "token"), ("grpo", "dr_grpo"), ("grpo", "sequence_mean"), ("gspo", "token")])
def test_packed_layout_gives_the_padded_loss_and_gradient(loss_type, norm):
    # Packing puts several samples in one row: per-sample normalisers and GSPO's
    # sequence ratio must still see each sample alone.
    batch = _batch(lengths=(5, 7, 4, 6, 3))
    cfg = LossConfig(type=loss_type, normalization=norm)
    a, b = _leaf_logits(batch), _leaf_logits(batch)
    la, sa = _run(batch, cfg, plan_micro_batches(batch.sample_lengths(), 8), a)
    groups = plan_packed_micro_batches(batch.sample_lengths(), 12)
    assert any(len(g) > 1 for g in groups), "the test needs a row holding several samples"
    lb, sb = _run(batch, cfg, groups, b, packed=True)
    assert la == pytest.approx(lb, rel=1e-6)
    assert sa.metrics(loss_type) == pytest.approx(sb.metrics(loss_type), rel=1e-6)
    for x, y in zip(a, b):
        torch.testing.assert_close(x.grad, y.grad)


def test_packed_plan_respects_the_budget_and_keeps_every_sample_once():
    lengths = [5, 30, 7, 4, 12, 6, 3, 9, 1]
    rows = plan_packed_micro_batches(lengths, 16)
    assert sorted(i for r in rows for i in r) == list(range(len(lengths)))
    for r in rows:
        assert r == sorted(r)
        assert sum(lengths[i] for i in r) <= 16 or len(r) == 1  # an oversize sample rides alone
    assert [1] in rows  # 30 > 16: its own row
    assert rows == plan_packed_micro_batches(lengths, 16)  # deterministic
    # Denser than padding: fewer forward tokens than rows x longest.
    padded = plan_micro_batches(lengths, 16)
    assert sum(max(lengths[i] for i in r) * len(r) for r in padded) > sum(lengths)


def test_normalizations_on_policy_values():
    # On-policy (ratio 1): per-token loss = -A, so each normalisation has a closed form.
    batch = _batch()
    off = batch.sample_offsets.tolist()
    n = [int(batch.loss_mask[off[i]:off[i + 1]].sum()) for i in range(3)]
    adv = [1.0, -2.0, 0.5]
    expected = {
        "token": -sum(a * k for a, k in zip(adv, n)) / sum(n),
        "dr_grpo": -sum(a * k for a, k in zip(adv, n)) / (3 * 16),
        "sequence_mean": -sum(adv) / 3,
    }
    for norm, want in expected.items():
        logits = _leaf_logits(batch)
        # Make the inference logprobs equal the trainer's so the ratio is exactly 1.
        lp = torch.zeros_like(batch.inference_logprobs)
        for i, lg in enumerate(logits):
            s = off[i]
            tl = torch.log_softmax(lg.detach(), -1)[:-1].gather(-1, batch.input_ids[s + 1:off[i + 1], None])[:, 0]
            lp[s + 1:off[i + 1]] = torch.where(batch.loss_mask[s + 1:off[i + 1]], tl, torch.zeros_like(tl))
        batch.inference_logprobs = lp
        loss, stats = _run(batch, LossConfig(normalization=norm), [[0, 1, 2]], logits)
        assert loss == pytest.approx(want, rel=1e-5), norm
        m = stats.metrics("grpo")
        assert m["ratio_abs_dev"] < 1e-6 and abs(m["mismatch_kl"]) < 1e-6 and m["clip_frac"] == 0


def test_asymmetric_clipping_counts_clipped_tokens():
    batch = _batch(lengths=(6,), prompt=1)
    logits = _leaf_logits(batch)
    lp_now = torch.log_softmax(logits[0].detach(), -1)[:-1].gather(-1, batch.input_ids[1:, None])[:, 0]
    # Inference logprobs far below the trainer's: ratio >> 1 + eps_high with A > 0, so every token clips.
    batch.inference_logprobs = torch.cat([torch.zeros(1), lp_now - 1.0])
    _, stats = _run(batch, LossConfig(eps_high=0.28), [[0]], logits)
    m = stats.metrics("grpo")
    assert m["clip_frac"] == 1.0
    assert m["ratio_abs_dev"] == pytest.approx(math.e - 1, rel=1e-4)
    assert m["mismatch_kl"] == pytest.approx(math.e - 1 - 1, rel=1e-4)
    assert torch.all(logits[0].grad == 0), "fully clipped tokens must not push the policy further"
