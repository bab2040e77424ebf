"""The trust region (docs/training.md, "Which bounds act"): several updates per batch with the
decoupled objective (behaviour / proximal / current policies), icepop masking, the rollback of
a failed multi-update step, and the KL term's gradient."""

import math

import pytest
import torch

from ratchet_trainer.core import Trainer, load_batch
from ratchet_trainer.core.batch import batch_from_tensors, make_micro_batch
from ratchet_trainer.core.config import ConfigError, LossConfig
from ratchet_trainer.core.loss import LossStats, Normalizer, micro_batch_loss
from ratchet_trainer.core.trainer import NonFiniteGradientError
from helpers import make_cfg, make_samples, on_policy_batch, snapshot

V = 7


def _one_sample_batch(n=6, prompt=1, adv=1.0, behaviour=None, proximal=None):
    mask = torch.tensor([0] * prompt + [1] * (n - prompt), dtype=torch.uint8)
    lp = torch.zeros(n) if behaviour is None else behaviour
    t = {"input_ids": torch.arange(n, dtype=torch.int32) % V, "position_ids": torch.arange(n, dtype=torch.int32),
         "loss_mask": mask, "advantages": mask.float() * adv, "inference_logprobs": lp.float(),
         "sample_offsets": torch.tensor([0, n], dtype=torch.int64)}
    b = batch_from_tensors(t, {"format": "ratchet.batch/v1"})
    b.proximal_logprobs = proximal
    return b


def _loss(batch, logits, cfg):
    mb = make_micro_batch(batch, [0], torch.device("cpu"))
    tps = torch.tensor([int(batch.loss_mask.sum())])
    stats = LossStats()
    loss = micro_batch_loss(logits, mb, cfg, Normalizer(int(tps.sum()), 1, tps, 16), stats)
    return loss, stats


def _logits_with_logprobs(ids, target_lp):
    """[1, n, V] logits whose logprob of ids[t] at t is target_lp[t] (t >= 1)."""
    n = ids.numel()
    logits = torch.zeros(1, n, V)
    for t in range(1, n):
        p = math.exp(float(target_lp[t]))
        other = math.log((1 - p) / (V - 1))
        logits[0, t - 1] = other
        logits[0, t - 1, int(ids[t])] = math.log(p)
    return logits.requires_grad_(True)


# -- the loss: ratio against proximal, weight proximal / behaviour ---------------------------

def test_decoupled_ratio_is_against_the_proximal_policy_and_the_clip_acts():
    # Current policy moved up from the proximal one by 0.5 nats per token: ratio e^0.5 > 1.28.
    n = 6
    prox = torch.full((n,), -1.5)
    batch = _one_sample_batch(n, behaviour=prox.clone(), proximal=prox)
    logits = _logits_with_logprobs(batch.input_ids, prox + 0.5)
    _, stats = _loss(batch, logits, LossConfig(normalization="token", correction="tis"))
    m = stats.metrics("grpo")
    assert m["clip_frac"] == 1.0  # every token's ratio is over 1 + eps_high
    assert m["policy_ratio_abs_dev"] == pytest.approx(math.exp(0.5) - 1, rel=1e-4)
    assert m["mismatch_abs_mean"] == pytest.approx(0.0, abs=1e-6)  # proximal agrees with behaviour
    # Without proximal logprobs (one update per batch) the ratio is 1: the clip cannot act.
    batch1 = _one_sample_batch(n, behaviour=prox.clone())
    _, stats1 = _loss(batch1, _logits_with_logprobs(batch1.input_ids, prox + 0.5), LossConfig(normalization="token", correction="tis"))
    assert stats1.metrics("grpo")["clip_frac"] == 0.0


def test_tis_weight_is_proximal_over_behaviour_capped():
    n = 5
    prox = torch.full((n,), -1.0)
    behaviour = prox - torch.tensor([0.0, 0.1, 0.3, 2.0, 0.0])  # weight e^0.1, e^0.3, capped at 2
    batch = _one_sample_batch(n, behaviour=behaviour, proximal=prox)
    logits = _logits_with_logprobs(batch.input_ids, prox)  # current = proximal: ratio 1
    loss, stats = _loss(batch, logits, LossConfig(normalization="token", correction="tis"))
    w = torch.tensor([math.exp(0.1), math.exp(0.3), 2.0, 1.0])  # tokens 1..4
    assert float(loss.detach()) == pytest.approx(-float(w.sum()) / 4, rel=1e-5)
    assert stats.capped == 1


def test_icepop_drops_tokens_whose_weight_is_outside_the_bounds_and_weights_the_rest():
    n = 6
    prox = torch.full((n,), -1.0)
    # log weights per trainable token: 0.2 kept, 0.8 (e^0.8 > 2) dropped, -0.9 (e^-0.9 < 0.5) dropped, -0.3 kept, 0 kept
    lw = torch.tensor([0.0, 0.2, 0.8, -0.9, -0.3, 0.0])
    batch = _one_sample_batch(n, behaviour=prox - lw, proximal=prox)
    logits = _logits_with_logprobs(batch.input_ids, prox)
    loss, stats = _loss(batch, logits, LossConfig(normalization="token", correction="icepop", icepop_low=0.5, icepop_high=2.0))
    kept = [math.exp(0.2), math.exp(-0.3), 1.0]
    assert float(loss.detach()) == pytest.approx(-sum(kept) / 5, rel=1e-5)
    assert stats.masked == 2
    loss.backward()
    g = logits.grad[0]
    assert torch.all(g[2 - 1] == 0) and torch.all(g[3 - 1] == 0)  # dropped tokens: no gradient
    assert g[1 - 1].abs().sum() > 0


def test_gspo_icepop_weight_is_the_sequence_mean_of_kept_tokens():
    n = 5
    prox = torch.full((n,), -1.0)
    lw = torch.tensor([0.0, 0.2, 0.9, -0.2, 0.4])  # 0.9 dropped
    batch = _one_sample_batch(n, behaviour=prox - lw, proximal=prox)
    logits = _logits_with_logprobs(batch.input_ids, prox)
    loss, stats = _loss(batch, logits, LossConfig(kind="gspo", correction="icepop"))
    # 4 trainable tokens, 3 kept: the dropped one's weight is not in the mean (nor is its count).
    assert float(loss.detach()) == pytest.approx(-math.exp((0.2 - 0.2 + 0.4) / 3), rel=1e-5)
    assert stats.masked == 1


@pytest.mark.parametrize("correction", ["mask", "icepop"])
def test_gspo_sequence_ratio_and_weight_are_means_over_the_kept_tokens(correction):
    # Several updates: current moved from proximal by `step` per token; proximal differs from
    # behaviour by `gap`, and one token's gap is past both modes' bounds (dropped).
    n = 7
    prox = torch.full((n,), -1.2)
    step = torch.tensor([0.0, 0.01, 0.03, 0.5, -0.02, 0.04, 0.02])
    gap = torch.tensor([0.0, 0.05, -0.1, 1.5, 0.2, 0.0, -0.05])  # log pi_prox - log pi_vllm; 1.5 dropped
    batch = _one_sample_batch(n, adv=-1.0, behaviour=prox - gap, proximal=prox)
    logits = _logits_with_logprobs(batch.input_ids, prox + step)
    loss, stats = _loss(batch, logits, LossConfig(kind="gspo", correction=correction))
    # Independently: the kept tokens, the ratio's log per token against the clip's reference
    # (mask: behaviour, icepop: proximal), their mean, and (icepop) the weight's mean.
    kept = [t for t in range(1, n) if abs(float(gap[t])) <= 1.0]
    assert len(kept) == 5 and stats.masked == 1
    if correction == "mask":
        s = math.exp(sum(float(step[t] + gap[t]) for t in kept) / len(kept))
        w = 1.0
    else:
        s = math.exp(sum(float(step[t]) for t in kept) / len(kept))
        w = math.exp(sum(float(gap[t]) for t in kept) / len(kept))
    # A = -1 and s > 1 + eps_high: min(s * A, clip(s) * A) = -s, unclipped (and below the dual clip's 3).
    assert 1.001 < s < 3
    assert float(loss.detach()) == pytest.approx(s * w, rel=1e-5)
    assert stats.metrics("gspo")["policy_ratio_abs_dev"] == pytest.approx((s - 1) * len(kept) / (n - 1), rel=1e-4)


def test_dual_clip_acts_between_current_and_proximal_and_is_reported():
    n = 4
    prox = torch.full((n,), -2.0)
    batch = _one_sample_batch(n, adv=-1.0, behaviour=prox.clone(), proximal=prox)
    logits = _logits_with_logprobs(batch.input_ids, prox + 1.5)  # ratio e^1.5 = 4.5 > dual_clip 3
    loss, stats = _loss(batch, logits, LossConfig(normalization="token", correction="tis"))
    assert float(loss.detach()) == pytest.approx(3.0, rel=1e-5)  # -(3 * A)
    assert stats.metrics("grpo")["dual_clip_frac"] == 1.0


# -- the KL term ------------------------------------------------------------------------------

def test_kl_term_gradient_is_the_gradient_of_kl_pi_to_ref():
    # Over every token of a small vocabulary, each weighted by its probability under pi (the
    # expectation the sampled loss estimates), the KL term's gradient must equal the exact
    # gradient of KL(pi || ref) = sum_x pi(x) (log pi(x) - log ref(x)).
    g = torch.Generator().manual_seed(0)
    z = torch.randn(V, generator=g)
    ref_logits = torch.randn(V, generator=g)
    zl = z.clone().requires_grad_(True)
    logpi = torch.log_softmax(zl, -1)
    exact = torch.autograd.grad((logpi.exp() * (logpi - torch.log_softmax(ref_logits, -1))).sum(), zl)[0]

    cfg = LossConfig(normalization="token", kl_coef=1.0, correction="none")
    pi = torch.softmax(z, -1)
    total = torch.zeros(V)
    for x in range(V):
        ids = torch.tensor([0, x], dtype=torch.int32)
        t = {"input_ids": ids, "position_ids": torch.arange(2, dtype=torch.int32),
             "loss_mask": torch.tensor([0, 1], dtype=torch.uint8), "advantages": torch.zeros(2),
             "inference_logprobs": torch.zeros(2), "sample_offsets": torch.tensor([0, 2])}
        b = batch_from_tensors(t, {"format": "ratchet.batch/v1"})
        mb = make_micro_batch(b, [0], torch.device("cpu"))
        logits = torch.stack([z, z])[None].clone().requires_grad_(True)
        ref = torch.stack([ref_logits, ref_logits])[None]
        tps = torch.tensor([1])
        loss = micro_batch_loss(logits, mb, cfg, Normalizer(1, 1, tps, 16), LossStats(), ref_out=ref)
        loss.backward()
        total += float(pi[x]) * logits.grad[0, 0]
    assert torch.allclose(total, exact, atol=1e-6), (total, exact)


# -- the trainer: several updates per batch ---------------------------------------------------

def _off_policy_refs(trainer, tmp_path, step=0, trajectories=True):
    samples = make_samples(trainer.vocab_size, lengths=(16, 20, 12, 18, 14, 10), advantages=(1.0, -1.0, 0.5, -0.5, 1.0, -1.0))
    if trajectories:
        for i, s in enumerate(samples):
            s["trajectory"] = i // 2 if i < 4 else i - 2  # two split trajectories, then two whole ones
    return on_policy_batch(trainer, tmp_path, samples, step)


def test_several_updates_per_batch_move_the_policy_and_the_clip_acts(tmp_path):
    # A high learning rate and 2 mini-batches x 3 epochs: the policy leaves the proximal one
    # within the batch, and the clip (current vs proximal) must bind on some tokens.
    trainer = Trainer("run", make_cfg("tiny", optim={"lr": 0.05}, minibatches=2, epochs=3))
    r = trainer.step(0, load_batch(*_off_policy_refs(trainer, tmp_path)))
    assert r["updates"] == 6 and trainer.optimizer_steps == 6
    assert r["clip_frac"] > 0
    assert r["policy_ratio_abs_dev"] > 0.05
    # The first update of the batch starts at the proximal policy: on-policy batch, no mismatch.
    assert r["mismatch_abs_max"] < 1e-4


def test_one_update_per_batch_is_the_default_and_its_clip_cannot_act(tmp_path):
    trainer = Trainer("run", make_cfg("tiny", optim={"lr": 0.05}))
    r = trainer.step(0, load_batch(*_off_policy_refs(trainer, tmp_path)))
    assert r["updates"] == 1 and trainer.optimizer_steps == 1
    assert r["clip_frac"] == 0.0 and r["policy_ratio_abs_dev"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "gspo"])
def test_proximal_logprobs_are_the_policy_before_the_first_update(loss_type, tmp_path):
    trainer = Trainer("run", make_cfg("tiny", loss={"type": loss_type}, minibatches=2, epochs=2, packing=loss_type == "gspo"))
    batch = load_batch(*_off_policy_refs(trainer, tmp_path))
    beats = []
    prox = trainer._proximal_logprobs(0, batch, trainer.cfg.micro_batch_tokens, beats.append)
    assert beats and beats[-1]["phase"] == "proximal" and beats[-1]["micro_batch"] == beats[-1]["micro_batches"]
    ref = torch.cat(trainer.sample_logprobs(batch))
    m = batch.loss_mask
    assert torch.allclose(prox[m], ref[m], atol=1e-5)
    assert torch.all(prox[~m] == 0)


def test_minibatches_hold_whole_trajectories_balanced_by_tokens(tmp_path):
    trainer = Trainer("run", make_cfg("tiny", minibatches=3))
    batch = load_batch(*_off_policy_refs(trainer, tmp_path))
    parts = trainer.minibatches(batch)
    assert sorted(i for p in parts for i in p) == list(range(batch.num_samples))
    traj = batch.trajectories().tolist()
    owner = {}
    for k, p in enumerate(parts):
        for i in p:
            assert owner.setdefault(traj[i], k) == k  # a trajectory is never split
    assert len(parts) == 3
    # More parts asked than trajectories: one per trajectory.
    trainer.cfg = make_cfg("tiny", minibatches=50)
    assert len(trainer.minibatches(batch)) == len(set(traj))


def test_a_mini_batch_update_is_the_step_on_that_mini_batch_alone(tmp_path):
    # minibatches=2: the first update is the step one would take on the first part alone,
    # normalised over that part (the proximal policy is the current one there).
    samples = make_samples(256, lengths=(16, 20, 12, 18), advantages=(1.0, -1.0, 0.5, -0.5))
    a = Trainer("run", make_cfg("tiny", minibatches=2))
    b = Trainer("run", make_cfg("tiny"))
    full = load_batch(*on_policy_batch(a, tmp_path, samples, 0, name="full"))
    part = load_batch(*on_policy_batch(b, tmp_path, samples[:2], 0, name="part"))
    assert a.minibatches(full) == [[0, 1], [2, 3]]
    after_first = []
    step = a.optimizer.step

    def record(*args, **kw):
        out = step(*args, **kw)
        if not after_first:
            after_first.append(snapshot(a))
        return out
    a.optimizer.step = record
    ra = a.step(0, full)
    b.step(0, part)
    sb = snapshot(b)
    assert ra["updates"] == 2
    assert all(torch.allclose(after_first[0][k], sb[k], atol=1e-6) for k in sb)


def test_a_failed_update_undoes_the_steps_earlier_updates(tmp_path):
    trainer = Trainer("run", make_cfg("tiny", optim={"lr": 0.05}, minibatches=2, epochs=2))
    refs = _off_policy_refs(trainer, tmp_path)
    before = snapshot(trainer)
    norms = iter([0.5, 0.5, float("nan")])
    clip = trainer._clip_grads
    trainer._clip_grads = lambda: (clip(), next(norms))[1]
    with pytest.raises(NonFiniteGradientError, match="update 3 of 4"):
        trainer.step(0, load_batch(*refs))
    after = snapshot(trainer)
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert trainer.optimizer_steps == 0 and not trainer.optimizer.state and trainer.ledger == {}
    # The same step then applies cleanly.
    trainer._clip_grads = clip
    assert trainer.step(0, load_batch(*refs))["updates"] == 4


@pytest.mark.parametrize("raw,message", [
    ({"minibatches": 0}, r"trainer_config.minibatches must be >= 1"),
    ({"epochs": 101}, r"trainer_config.epochs must be <= 100"),
    ({"loss": {"icepop_low": 1.5}}, r"trainer_config.loss.icepop_low must be <= 1"),
    ({"loss": {"icepop_high": 0.5}}, r"trainer_config.loss.icepop_high must be >= 1"),
    ({"loss": {"correction": "clip"}}, r"trainer_config.loss.correction must be one of \['tis', 'icepop', 'mask', 'none'\]"),
])
def test_update_and_correction_settings_are_validated(raw, message):
    with pytest.raises(ConfigError, match=message):
        make_cfg("tiny", **raw)
