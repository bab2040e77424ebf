"""Training-core tests with real gradients on CPU: a tiny random Llama always, and the
converted SmolLM2-135M-Instruct where it exists (skipped loudly otherwise)."""

import json

import pytest
import torch

from ratchet_trainer.core import BatchError, CheckpointError, Trainer, load_batch, restore_checkpoint, save_checkpoint
from ratchet_trainer.core.artifacts import verify_dir
from ratchet_trainer.core.batch import make_micro_batch
from ratchet_trainer.core.loss import LossStats, Normalizer, micro_batch_loss
from helpers import make_cfg, make_samples, on_policy_batch, snapshot

KINDS = ["tiny", "real"]


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def seq_logprob(trainer, batch_refs, i):
    batch = load_batch(*batch_refs)
    off = batch.sample_offsets.tolist()
    lp = trainer.sample_logprobs(batch)[i]
    return float((lp * batch.loss_mask[off[i]:off[i + 1]]).sum())


def test_model_level_masking_zero_gradient(tmp_path):
    trainer = Trainer("run", make_cfg("tiny"))
    refs = on_policy_batch(trainer, tmp_path, make_samples(trainer.vocab_size), 0)
    batch = load_batch(*refs)
    mb = make_micro_batch(batch, list(range(batch.num_samples)), trainer.device)
    logits = trainer.model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, position_ids=mb.position_ids).logits
    logits.retain_grad()
    tps = torch.tensor([6 if False else int(mb.loss_mask[r].sum()) for r in range(batch.num_samples)])
    norm = Normalizer(int(tps.sum()), batch.num_samples, tps, 64)
    micro_batch_loss(logits, mb, trainer.cfg.loss, norm, LossStats()).backward()
    used = torch.zeros_like(mb.loss_mask)
    used[:, :-1] = mb.loss_mask[:, 1:]
    assert torch.all(logits.grad[~used] == 0)
    assert logits.grad[used].abs().sum() > 0


def test_packed_forward_keeps_samples_apart(kind, tmp_path):
    # One packed row, no attention mask: each sample's logits must equal its logits run alone,
    # which holds only if the model reads the restarting position ids as sample boundaries.
    from ratchet_trainer.core.batch import make_packed_micro_batch

    trainer = Trainer("run", make_cfg(kind))
    batch = load_batch(*on_policy_batch(trainer, tmp_path, make_samples(trainer.vocab_size), 0))
    trainer.model.eval()
    with torch.no_grad():
        mb = make_packed_micro_batch(batch, list(range(batch.num_samples)), trainer.device)
        packed = trainer.model(**Trainer._forward_args(mb)).logits[0]
        off = batch.sample_offsets.tolist()
        for i in range(batch.num_samples):
            alone = make_micro_batch(batch, [i], trainer.device)
            ref = trainer.model(input_ids=alone.input_ids, position_ids=alone.position_ids).logits[0]
            torch.testing.assert_close(packed[off[i]:off[i + 1]], ref, rtol=1e-4, atol=1e-4)


def test_packed_and_padded_steps_give_the_same_gradient(kind, tmp_path):
    results = {}
    for packing in (True, False):
        trainer = Trainer("run", make_cfg(kind, packing=packing, shared_prefix=False, micro_batch_tokens=66))
        grads = {}
        apply = trainer.optimizer.step

        def capture(*a, _t=trainer, _g=grads, _apply=apply, **kw):
            # Compare gradients, not weights: Adam's first step is ~lr*sign(g), which
            # magnifies float noise on near-zero gradients.
            _g.update({n: p.grad.detach().clone() for n, p in _t.model.named_parameters() if p.grad is not None})
            return _apply(*a, **kw)

        trainer.optimizer.step = capture
        refs = on_policy_batch(trainer, tmp_path / str(packing), make_samples(trainer.vocab_size), 0)
        results[packing] = (trainer.step(0, load_batch(*refs)), grads)
    (mp, gp), (mq, gq) = results[True], results[False]
    assert mp["padding_frac"] == 0.0 and mq["padding_frac"] > 0.0
    assert mp["micro_batches"] < mq["micro_batches"]
    assert mp["loss"] == pytest.approx(mq["loss"], rel=1e-4, abs=1e-6)
    assert gp.keys() == gq.keys() and gp
    for k in gp:
        torch.testing.assert_close(gp[k], gq[k], rtol=1e-3, atol=1e-6)


def test_learning_moves_logprobs_with_advantage_sign(kind, tmp_path):
    trainer = Trainer("run", make_cfg(kind))
    samples = make_samples(trainer.vocab_size, lengths=(16, 16), advantages=(1.0, -1.0))
    first = on_policy_batch(trainer, tmp_path, samples, 0)
    before = [seq_logprob(trainer, first, i) for i in (0, 1)]
    for step in range(4):
        refs = on_policy_batch(trainer, tmp_path, samples, step)
        m = trainer.step(step, load_batch(*refs))
        assert m["applied"] and m["policy_version"] == step + 1
    after = [seq_logprob(trainer, first, i) for i in (0, 1)]
    assert after[0] > before[0] + 0.05, (before, after)
    assert after[1] < before[1] - 0.05, (before, after)


def test_off_policy_start_ratio_is_one_and_mismatch_is_reported(kind, tmp_path):
    trainer = Trainer("run", make_cfg(kind))
    samples = make_samples(trainer.vocab_size)
    m = trainer.step(0, load_batch(*on_policy_batch(trainer, tmp_path, samples, 0)))
    assert m["ratio_abs_dev"] < 1e-4 and abs(m["mismatch_kl"]) < 1e-6 and m["clip_frac"] == 0
    assert m["mismatch_exceeded"] is False
    # Inference logprobs 0.3 nats off on every trainable token: the mismatch is measured and flagged.
    refs = on_policy_batch(trainer, tmp_path, samples, 1)
    b = load_batch(*refs)
    b.inference_logprobs = torch.where(b.loss_mask, b.inference_logprobs - 0.3, b.inference_logprobs)
    m = trainer.step(1, b)
    assert m["ratio_abs_dev"] > 0.3 and m["mismatch_kl"] > 0.03 and m["mismatch_exceeded"] is True


def test_step_delivered_twice_changes_weights_once(kind, tmp_path):
    trainer = Trainer("run", make_cfg(kind))
    batch = load_batch(*on_policy_batch(trainer, tmp_path, make_samples(trainer.vocab_size), 0))
    w0 = snapshot(trainer)
    first = trainer.step(0, batch)
    w1 = snapshot(trainer)
    again = trainer.step(0, batch)
    w2 = snapshot(trainer)
    assert first["applied"] is True and again["applied"] is False
    assert {k: v for k, v in again.items() if k != "applied"} == {k: v for k, v in first.items() if k != "applied"}
    assert any(not torch.equal(w0[k], w1[k]) for k in w0)
    assert all(torch.equal(w1[k], w2[k]) for k in w1)
    assert trainer.policy_version == 1 and trainer.optimizer_steps == 1


@pytest.mark.parametrize("problem", ["token_id", "too_long"])
def test_batch_not_matching_model_is_rejected_and_state_unchanged(problem, tmp_path):
    trainer = Trainer("run", make_cfg("tiny"))
    samples = make_samples(trainer.vocab_size)
    if problem == "token_id":
        samples[1]["input_ids"][8] = trainer.vocab_size + 5
        needle = f"token id {trainer.vocab_size + 5}, outside the model's vocabulary"
    else:
        samples[0] = {**samples[0], "input_ids": list(range(1, 81)), "loss_mask": [0] * 6 + [1] * 74,
                      "inference_logprobs": [0.0] * 80}
        needle = "80 tokens, longer than trainer_config.seq_len=64"
    from ratchet_trainer.core import write_batch
    refs = write_batch(tmp_path, "bad", samples, {"run_id": "run", "step": 0, "vocab_size": trainer.vocab_size})
    w0, opt0 = snapshot(trainer), json.dumps(trainer.optimizer.state_dict()["state"], default=str)
    with pytest.raises(BatchError, match=needle):
        trainer.step(0, load_batch(*refs))
    assert all(torch.equal(w0[k], v) for k, v in snapshot(trainer).items())
    assert trainer.ledger == {} and json.dumps(trainer.optimizer.state_dict()["state"], default=str) == opt0


def test_checkpoint_roundtrip_and_peft_adapter_layout(tmp_path):
    cfg = make_cfg("tiny")
    a = Trainer("run", cfg)
    samples = make_samples(a.vocab_size)
    a.step(0, load_batch(*on_policy_batch(a, tmp_path, samples, 0)))
    refs = save_checkpoint(a, tmp_path / "art", 0)
    root = verify_dir(refs["checkpoint"], "checkpoint")
    verify_dir(refs["adapter"], "adapter")
    for f in ("optimizer.pt", "rng.pt", "ledger.json", "trainer_state.json", "MANIFEST.sha256",
              "adapter/adapter_model.safetensors", "adapter/adapter_config.json"):
        assert (root / f).is_file(), f
    ac = json.loads((root / "adapter/adapter_config.json").read_text())
    assert ac["r"] == 8 and ac["lora_alpha"] == 16 and ac["peft_type"] == "LORA"
    assert save_checkpoint(a, tmp_path / "art", 0) == refs  # idempotent

    b = Trainer("run", cfg)
    restore_checkpoint(b, refs["checkpoint"])
    assert b.ledger.keys() == a.ledger.keys() and b.policy_version == 1
    assert json.loads((root / "trainer_state.json").read_text())["optimizer_steps"] == 1 == b.optimizer_steps
    for k, v in snapshot(a).items():
        torch.testing.assert_close(snapshot(b)[k], v, rtol=0, atol=0)
    batch1 = load_batch(*on_policy_batch(a, tmp_path, samples, 1))
    ma, mb = a.step(1, batch1), b.step(1, batch1)
    assert ma["loss"] == pytest.approx(mb["loss"], rel=1e-6)
    for k, v in snapshot(a).items():
        torch.testing.assert_close(snapshot(b)[k], v)


def test_full_finetune_checkpoint_roundtrip(tmp_path):
    cfg = make_cfg("tiny", mode="full")
    a = Trainer("run", cfg)
    a.step(0, load_batch(*on_policy_batch(a, tmp_path, make_samples(a.vocab_size), 0)))
    refs = save_checkpoint(a, tmp_path / "art", 0)
    assert refs["adapter"] is None and refs["weights"]["uri"].endswith("/model")
    b = Trainer("run", cfg)
    restore_checkpoint(b, refs["checkpoint"])
    for k, v in a.model.state_dict().items():
        torch.testing.assert_close(b.model.state_dict()[k], v, rtol=0, atol=0)


@pytest.mark.parametrize("other", ["rank", "model", "run"])
def test_checkpoint_from_another_model_or_config_is_rejected(other, tmp_path):
    a = Trainer("run", make_cfg("tiny"))
    a.step(0, load_batch(*on_policy_batch(a, tmp_path, make_samples(a.vocab_size), 0)))
    refs = save_checkpoint(a, tmp_path / "art", 0)
    if other == "rank":
        b = Trainer("run", make_cfg("tiny", lora={"rank": 4, "alpha": 8}))
    elif other == "model":
        from helpers import TINY
        b = Trainer("run", make_cfg("tiny", model={"config": {**TINY, "hidden_size": 32}}))
    else:
        b = Trainer("other-run", make_cfg("tiny"))
    w0 = snapshot(b)
    with pytest.raises(CheckpointError, match="another model" if other != "run" else "belongs to run"):
        restore_checkpoint(b, refs["checkpoint"])
    assert b.ledger == {} and all(torch.equal(w0[k], v) for k, v in snapshot(b).items())


def test_kl_to_reference_and_gspo_run(tmp_path):
    cfg = make_cfg("tiny", loss={"kind": "gspo", "kl_coef": 0.1, "eps_low": 3e-3, "eps_high": 4e-3})
    t = Trainer("run", cfg)
    samples = make_samples(t.vocab_size)
    m0 = t.step(0, load_batch(*on_policy_batch(t, tmp_path, samples, 0)))
    assert m0["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # LoRA B starts at 0: policy == reference
    batch = load_batch(*on_policy_batch(t, tmp_path, samples, 1))
    m1 = t.step(1, batch)
    assert m1["kl_ref"] > 0 and 0 <= m1["clip_frac"] <= 1


def test_packing_auto_is_padded_on_cpu_and_explicit_settings_win():
    assert Trainer("run", make_cfg("tiny")).packing is False  # default "auto", device cpu
    assert Trainer("run", make_cfg("tiny", packing=True)).packing is True
    assert Trainer("run", make_cfg("tiny", packing=False)).packing is False
    # The padded layout's rows share their prefixes unless told not to; a packed row has no 4-D mask.
    assert Trainer("run", make_cfg("tiny")).shared_prefix is True
    assert Trainer("run", make_cfg("tiny", packing=True)).shared_prefix is False
    assert Trainer("run", make_cfg("tiny", shared_prefix=False)).shared_prefix is False


def _with_random_lora_b(trainer, seed=0):
    # A fresh adapter's B is 0, so dropout on A's input would change nothing: give B weight.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in trainer.model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)


def test_training_logprobs_are_computed_with_dropout_off(tmp_path):
    # LoRA dropout 0.5: with dropout on in the training forward, the trainer's
    # logprobs differ from the policy's (the ones vLLM samples from) and an
    # on-policy batch shows a large, random mismatch.
    trainer = Trainer("run", make_cfg("tiny", lora={"rank": 8, "alpha": 16, "dropout": 0.5}))
    _with_random_lora_b(trainer)
    samples = make_samples(trainer.vocab_size)
    m = trainer.step(0, load_batch(*on_policy_batch(trainer, tmp_path, samples, 0)))
    assert m["mismatch_abs_max"] < 1e-4, m
    assert m["mismatch_capped_frac"] == 0 and m["mismatch_masked_frac"] == 0


def test_trainer_scores_at_the_sampling_temperature(tmp_path):
    # Inference logprobs of softmax(logits / 0.6), as vLLM's processed logprobs are:
    # the trainer configured with that temperature agrees with them.
    cfg = make_cfg("tiny", loss={"temperature": 0.6})
    trainer = Trainer("run", cfg)
    samples = make_samples(trainer.vocab_size)
    refs = on_policy_batch(trainer, tmp_path, samples, 0)
    m = trainer.step(0, load_batch(*refs))
    assert m["mismatch_abs_max"] < 1e-4
    cold = Trainer("run", make_cfg("tiny"))  # same seed, same weights, T = 1
    b = load_batch(*refs)
    off = b.sample_offsets.tolist()
    diff = max(float((lp - b.inference_logprobs[off[i]:off[i + 1]]).abs().max())
               for i, lp in enumerate(cold.sample_logprobs(b)))
    assert diff > 0.05


def test_split_trajectory_step_runs_and_counts_trajectories(tmp_path):
    trainer = Trainer("run", make_cfg("tiny", loss={"kind": "gspo"}))
    samples = make_samples(trainer.vocab_size)
    for s, t in zip(samples, (0, 0, 1, 2)):
        s["trajectory"] = t
    samples[1]["advantage"] = samples[0]["advantage"]
    m = trainer.step(0, load_batch(*on_policy_batch(trainer, tmp_path, samples, 0)))
    assert m["samples"] == 4 and m["trajectories"] == 3 and m["applied"] is True
