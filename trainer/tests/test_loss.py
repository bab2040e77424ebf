"""Loss-level tests on hand-made logits: masking, normalisation, clipping, micro-batch invariance."""

import math

import pytest
import torch

from ratchet_trainer.core.batch import (batch_from_tensors, make_micro_batch, make_packed_micro_batch, plan_micro_batches,
                                        plan_packed_micro_batches)
from ratchet_trainer.core.config import LossConfig as _LossConfig
from ratchet_trainer.core.loss import LossStats, Normalizer, micro_batch_loss

V = 11


def LossConfig(**kw) -> _LossConfig:  # noqa: N802
    """These tests' expected numbers were written for token normalization, the trainer's default then."""
    return _LossConfig(**{"normalization": "token", **kw})


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


@pytest.mark.parametrize("loss_type,norm", [("grpo", "token"), ("grpo", "dr_grpo"), ("grpo", "sequence"), ("gspo", "token")])
def test_masked_positions_get_exactly_zero_gradient(loss_type, norm):
    batch = _batch()
    cfg = LossConfig(kind=loss_type, normalization=norm, eps_low=1.0, eps_high=1e6)  # no clipping: every used row has gradient
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


@pytest.mark.parametrize("loss_type,norm", [("grpo", "token"), ("grpo", "dr_grpo"), ("grpo", "sequence"), ("gspo", "token")])
def test_packed_layout_gives_the_padded_loss_and_gradient(loss_type, norm):
    # Packing puts several samples in one row: per-sample normalisers and GSPO's
    # sequence ratio must still see each sample alone.
    batch = _batch(lengths=(5, 7, 4, 6, 3))
    cfg = LossConfig(kind=loss_type, normalization=norm)
    a, b = _leaf_logits(batch), _leaf_logits(batch)
    la, sa = _run(batch, cfg, plan_micro_batches(batch.sample_lengths(), 8), a)
    groups = plan_packed_micro_batches(batch.sample_lengths(), 12)
    assert any(len(g) > 1 for g in groups), "the test needs a row holding several samples"
    lb, sb = _run(batch, cfg, groups, b, packed=True)
    # fp32 sums in another order (the importance weights add one more product per token).
    assert la == pytest.approx(lb, rel=1e-5)
    assert sa.metrics(loss_type) == pytest.approx(sb.metrics(loss_type), rel=1e-5, abs=1e-7)
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
        "sequence": -sum(adv) / 3,
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
    _, stats = _run(batch, LossConfig(eps_high=0.28, correction="none"), [[0]], logits)
    m = stats.metrics("grpo")
    assert m["clip_frac"] == 1.0
    assert m["ratio_abs_dev"] == pytest.approx(math.e - 1, rel=1e-4)
    assert m["mismatch_kl"] == pytest.approx(math.e - 1 - 1, rel=1e-4)
    assert torch.all(logits[0].grad == 0), "fully clipped tokens must not push the policy further"


# -- train/inference mismatch: temperature, truncated IS, masking, dual clip, floors ---------------


def _own_logprobs(batch, logits, temperature=1.0):
    """The trainer's logprobs of each trainable token (0 elsewhere), from per-sample logits."""
    off = batch.sample_offsets.tolist()
    lp = torch.zeros_like(batch.inference_logprobs)
    for i, lg in enumerate(logits):
        s, e = off[i], off[i + 1]
        tl = torch.log_softmax(lg.detach() / temperature, -1)[:-1].gather(-1, batch.input_ids[s + 1:e, None])[:, 0]
        lp[s + 1:e] = torch.where(batch.loss_mask[s + 1:e], tl, torch.zeros_like(tl))
    return lp


def test_temperature_scales_logits_before_logprobs():
    # vLLM's processed logprobs are of softmax(logits / T): fed those, the trainer
    # must see no mismatch at all; fed T=1 logprobs, it must see one.
    batch = _batch()
    logits = _leaf_logits(batch)
    batch.inference_logprobs = _own_logprobs(batch, logits, temperature=0.7)
    _, stats = _run(batch, LossConfig(temperature=0.7), [[0, 1, 2]], logits)
    assert stats.metrics("grpo")["mismatch_abs_max"] < 1e-5
    _, stats = _run(batch, LossConfig(temperature=1.0), [[0, 1, 2]], _leaf_logits(batch))
    assert stats.metrics("grpo")["mismatch_abs_max"] > 0.05


@pytest.mark.parametrize("loss_type", ["grpo", "gspo"])
def test_floor_and_non_finite_behaviour_logprobs_give_finite_bounded_gradients(loss_type):
    # vLLM floors an excluded token's logprob at -9999; NaN/inf can arrive too.
    batch = _batch()
    logits = _leaf_logits(batch)
    lp = _own_logprobs(batch, logits)
    idx = torch.nonzero(batch.loss_mask).flatten()
    lp[idx[0]], lp[idx[3]], lp[idx[6]] = -9999.0, float("-inf"), float("nan")
    batch.inference_logprobs = lp
    for correction in ("tis", "mask", "none"):
        ls = _leaf_logits(batch)
        loss, stats = _run(batch, LossConfig(kind=loss_type, correction=correction), [[0, 1, 2]], ls)
        assert math.isfinite(loss), correction
        for g in ls:
            assert torch.isfinite(g.grad).all(), correction
            assert g.grad.abs().max() < 10.0, correction
        m = stats.metrics(loss_type)
        assert m["floor_logprobs"] == 3 and m["mismatch_masked_frac"] >= 3 / stats.tokens
        assert math.isfinite(m["ratio_max"]) and math.isfinite(m["mismatch_abs_max"])


def test_dual_clip_bounds_the_gradient_of_a_negative_advantage():
    # A token the trainer finds e^5 times likelier than vLLM did, with A < 0: PPO's
    # min() picks the unclipped r*A, whose gradient grows with r. The dual clip caps it.
    batch = _batch(lengths=(6,), prompt=1)
    batch.advantages = torch.where(batch.loss_mask, torch.tensor(-1.0), torch.tensor(0.0))
    logits = _leaf_logits(batch)
    batch.inference_logprobs = _own_logprobs(batch, logits) - 5.0 * batch.loss_mask.float()
    _run(batch, LossConfig(correction="none", dual_clip=0.0), [[0]], logits)
    unbounded = float(logits[0].grad.abs().max())
    logits = _leaf_logits(batch)
    _, stats = _run(batch, LossConfig(correction="none", dual_clip=3.0), [[0]], logits)
    assert unbounded > 10.0  # today's loss: r = e^5 ~ 148 times the on-policy gradient
    assert float(logits[0].grad.abs().max()) == 0.0  # beyond c*A the objective is flat
    logits = _leaf_logits(batch)
    _run(batch, LossConfig(correction="tis"), [[0]], logits)
    assert 0 < float(logits[0].grad.abs().max()) <= 2.0 / 5 + 1e-6  # weight capped at tis_cap, 5 tokens


def test_truncated_importance_sampling_caps_and_reports():
    batch = _batch(lengths=(6,), prompt=1)
    logits = _leaf_logits(batch)
    own = _own_logprobs(batch, logits)
    idx = torch.nonzero(batch.loss_mask).flatten()
    shift = torch.zeros_like(own)
    shift[idx[:2]] = 3.0  # trainer e^3 likelier than vLLM: weight capped at 2
    shift[idx[2:]] = -0.1  # vLLM slightly likelier: weight e^-0.1, not capped
    batch.inference_logprobs = own - shift
    loss, stats = _run(batch, LossConfig(correction="tis", tis_cap=2.0), [[0]], logits)
    m = stats.metrics("grpo")
    assert m["mismatch_capped_frac"] == pytest.approx(2 / 5)
    assert m["mismatch_abs_max"] == pytest.approx(3.0, rel=1e-5)
    assert m["mismatch_abs_mean"] == pytest.approx((2 * 3.0 + 3 * 0.1) / 5, rel=1e-4)
    # loss = -(1/5) * sum_t w_t * A (ratio 1 in value): A = 1.0 for this sample.
    assert loss == pytest.approx(-(2 * 2.0 + 3 * math.exp(-0.1)) / 5, rel=1e-5)


def test_mask_correction_drops_tokens_over_the_threshold():
    batch = _batch(lengths=(6,), prompt=1)
    logits = _leaf_logits(batch)
    own = _own_logprobs(batch, logits)
    idx = torch.nonzero(batch.loss_mask).flatten()
    batch.inference_logprobs = own.clone()
    batch.inference_logprobs[idx[0]] -= 2.0  # |delta| 2 > threshold 1
    _, stats = _run(batch, LossConfig(correction="mask", mask_threshold=1.0), [[0]], logits)
    assert stats.metrics("grpo")["mismatch_masked_frac"] == pytest.approx(1 / 5)
    row = int(idx[0]) - 1  # logits row predicting that token
    assert torch.all(logits[0].grad[row] == 0)
    assert logits[0].grad[row + 1].abs().sum() > 0


# -- one trajectory, one weight ------------------------------------------------------------------


def _split_batch(split: bool):
    """Two trajectories: A (advantage 1, 3 turns) and B (advantage -1, 1 turn).

    Unsplit, A is one sample holding its three turns' completions. Split, as when a
    chat template breaks the multi-turn prefix, A is three samples, each its
    context plus one turn: the same trainable tokens, more samples.
    """
    g = torch.Generator().manual_seed(3)
    turns = [torch.randint(0, V, (3,), generator=g) for _ in range(3)]
    prompt = torch.randint(0, V, (2,), generator=g)
    b_ids = torch.randint(0, V, (7,), generator=g)
    samples = []  # (ids, mask, adv, trajectory)
    if split:
        ctx = prompt
        for t in turns:
            ids = torch.cat([ctx, t])
            samples.append((ids, [0] * len(ctx) + [1] * 3, 1.0, 0))
            ctx = torch.cat([ctx, t, torch.randint(0, V, (1,), generator=g)])  # the tool reply
    else:
        ids = torch.cat([prompt, turns[0], torch.tensor([1]), turns[1], torch.tensor([2]), turns[2]])
        samples.append((ids, [0, 0, 1, 1, 1, 0, 1, 1, 1, 0, 1, 1, 1], 1.0, 0))
    samples.append((b_ids, [0, 0, 0, 1, 1, 1, 1], -1.0, 1))
    T = sum(len(s[0]) for s in samples)
    ids = torch.cat([s[0] for s in samples]).int()
    mask = torch.tensor([m for s in samples for m in s[1]], dtype=torch.uint8)
    adv = torch.tensor([s[2] * m for s in samples for m in s[1]], dtype=torch.float32)
    off = [0]
    for s in samples:
        off.append(off[-1] + len(s[0]))
    t = {"input_ids": ids, "position_ids": torch.cat([torch.arange(len(s[0])) for s in samples]).int(),
         "loss_mask": mask, "advantages": adv, "inference_logprobs": torch.zeros(T),
         "sample_offsets": torch.tensor(off, dtype=torch.int64),
         "trajectory_index": torch.tensor([s[3] for s in samples], dtype=torch.int64)}
    return batch_from_tensors(t, {"format": "ratchet.batch/v1"})


def _trajectory_weights(batch, loss_type, norm_kind):
    """d loss / d A per trajectory at ratio 1: the weight each trajectory carries in the batch."""
    from ratchet_trainer.core.loss import Normalizer
    norm = Normalizer.for_batch(batch, max_tokens=16)
    off = batch.sample_offsets.tolist()
    # Uniform logits: every trainable token has the same logprob, inference logprobs equal it.
    lp = torch.where(batch.loss_mask, torch.tensor(-math.log(V)), torch.tensor(0.0))
    batch.inference_logprobs = lp
    adv = batch.advantages.clone().requires_grad_(True)
    batch.advantages = adv
    stats = LossStats()
    cfg = LossConfig(kind=loss_type, normalization=norm_kind)
    total = 0.0
    for ids in plan_micro_batches(batch.sample_lengths(), 10_000, batch.trajectory_units()):
        mb = make_micro_batch(batch, ids, torch.device("cpu"))
        logits = torch.zeros(*mb.input_ids.shape, V)
        total = total + micro_batch_loss(logits, mb, cfg, norm, stats)
    (g,) = torch.autograd.grad(total, adv)
    traj = batch.trajectories()
    return [float(sum(g[off[i]:off[i + 1]].sum() for i in range(batch.num_samples) if int(traj[i]) == k))
            for k in range(2)]


@pytest.mark.parametrize("loss_type,norm_kind", [("grpo", "token"), ("grpo", "dr_grpo"), ("grpo", "sequence"),
                                                 ("gspo", "token")])
def test_a_trajectory_weighs_the_same_however_it_was_split(loss_type, norm_kind):
    whole = _trajectory_weights(_split_batch(False), loss_type, norm_kind)
    split = _trajectory_weights(_split_batch(True), loss_type, norm_kind)
    assert whole == pytest.approx(split, rel=1e-5)
    assert all(abs(w) > 0 for w in whole)


def test_gspo_sequence_ratio_spans_the_trajectory():
    # Split trajectory A: its segments' tokens share one sequence ratio. Shift the
    # inference logprobs of one segment only: with a per-sample ratio the other
    # segments would stay unclipped; over the trajectory every segment moves together.
    batch = _split_batch(True)
    norm_cfg = LossConfig(kind="gspo", correction="none")
    from ratchet_trainer.core.loss import Normalizer
    norm = Normalizer.for_batch(batch, max_tokens=16)
    assert norm.num_trajectories == 2 and norm.num_samples == 4
    lp = torch.where(batch.loss_mask, torch.tensor(-math.log(V)), torch.tensor(0.0))
    off = batch.sample_offsets.tolist()
    lp[off[0]:off[1]] = torch.where(batch.loss_mask[off[0]:off[1]], lp[off[0]:off[1]] - 0.3, lp[off[0]:off[1]])
    batch.inference_logprobs = lp
    stats = LossStats()
    groups = plan_micro_batches(batch.sample_lengths(), 6, batch.trajectory_units())
    assert groups[0] == [0, 1, 2], "a trajectory's segments share a micro-batch"
    packed = plan_packed_micro_batches(batch.sample_lengths(), 6, batch.trajectory_units())
    assert [0, 1, 2] in packed and [3] in packed, "packed rows keep a trajectory's segments together too"
    for ids in groups:
        mb = make_micro_batch(batch, ids, torch.device("cpu"))
        micro_batch_loss(torch.zeros(*mb.input_ids.shape, V), mb, norm_cfg, norm, stats)
    assert stats.seqs == 2  # two trajectories, not four samples


def test_gspo_clip_defaults_follow_the_loss():
    assert LossConfig(kind="gspo").clip_range() == (3e-4, 4e-4)
    assert LossConfig(kind="grpo").clip_range() == (0.2, 0.28)
