"""[model] init_from: a new run's first adapter is another run's (core/init_adapter.py).

The adapter one session saved, loaded as the initial adapter of a new session (another run id,
another LoRA seed, a fresh optimiser and ledger), gives the logprobs of the saved adapter,
computed independently: the base model with peft's own PeftModel.from_pretrained on the saved
adapter directory, log_softmax by hand. Tiny random Llama always; SmolLM2-135M where converted.
"""

from pathlib import Path

import pytest
import torch

from ratchet_trainer.commands import TrainerCommands
from ratchet_trainer.core import CheckpointError, Trainer, load_batch, restore_checkpoint, save_checkpoint
from ratchet_trainer.core.artifacts import ArtifactError
from ratchet_trainer.core.init_adapter import load_init_adapter, prepare_init
from ratchet_trainer.core.model import build_base
from helpers import TINY, make_cfg, make_samples, on_policy_batch, snapshot

KINDS = ["tiny", "real"]


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


def trained_origin(kind: str, tmp: Path, steps: int = 2, **over):
    """An origin run ("sft-1") trained `steps` steps, its last checkpoint saved."""
    a = Trainer("sft-1", make_cfg(kind, **over))
    samples = make_samples(a.vocab_size)
    for s in range(steps):
        a.step(s, load_batch(*on_policy_batch(a, tmp, samples, s, run_id="sft-1")))
    refs = save_checkpoint(a, tmp / "art", steps - 1)
    init = {"from": "sft-1", "run_id": "sft-1", "step": steps - 1, "policy_version": steps,
            "checkpoint": refs["checkpoint"], "adapter": refs["adapter"]}
    return a, samples, refs, init


def peft_logprobs(cfg, adapter_dir: Path, input_ids: list[int]) -> torch.Tensor:
    """Per-token logprobs (0 at the first token) of the base model with the saved adapter, via peft's loader."""
    from peft import PeftModel

    base = build_base(cfg, torch.device("cpu"))
    model = PeftModel.from_pretrained(base, str(adapter_dir)).eval()
    ids = torch.tensor([input_ids])
    with torch.no_grad():
        logits = model(input_ids=ids, use_cache=False).logits[0].float()
    lp = torch.log_softmax(logits[:-1], -1).gather(-1, ids[0, 1:, None])[:, 0]
    return torch.cat([lp.new_zeros(1), lp])


def test_init_adapter_gives_the_saved_adapters_logprobs(kind, tmp_path):
    a, samples, refs, init = trained_origin(kind, tmp_path)
    # The new run: its own id and another dropout (not in the weights); its fresh adapter (B = 0) differs from the saved one.
    cfg_b = make_cfg(kind, lora={"dropout": 0.1})
    b = Trainer("rl-1", cfg_b)
    fresh = snapshot(b)
    load_init_adapter(b, prepare_init(init, cfg_b, None))
    assert b.ledger == {} and b.policy_version == 0 and b.last_step == -1 and b.optimizer_steps == 0
    assert b.init_from == {"from": "sft-1", "run_id": "sft-1", "step": 1, "adapter_sha256": refs["adapter"]["sha256"]}
    assert any(not torch.equal(fresh[k], v) for k, v in snapshot(b).items())

    batch = load_batch(*on_policy_batch(a, tmp_path, samples, 9, name="probe", run_id="rl-1"))
    got = b.sample_logprobs(batch)
    adapter_dir = Path(refs["adapter"]["uri"].removeprefix("file://"))
    off = batch.sample_offsets.tolist()
    for i in range(batch.num_samples):
        ids = batch.input_ids[off[i]:off[i + 1]].tolist()
        want = peft_logprobs(make_cfg(kind), adapter_dir, ids)
        torch.testing.assert_close(got[i], want, rtol=1e-5, atol=1e-5)
    # ... and not the base model's (the adapter changed something), so the comparison can fail.
    base_only = peft_logprobs(make_cfg(kind), adapter_dir, batch.input_ids[off[0]:off[1]].tolist())
    with torch.no_grad(), b.model.disable_adapter():
        plain = b.sample_logprobs(batch)[0]
    assert not torch.allclose(plain, base_only, atol=1e-6)


def test_the_new_run_trains_from_it_as_its_step_0(tmp_path):
    _, samples, _, init = trained_origin("tiny", tmp_path)
    b = Trainer("rl-1", make_cfg("tiny"))
    load_init_adapter(b, prepare_init(init, b.cfg, None))
    m = b.step(0, load_batch(*on_policy_batch(b, tmp_path, samples, 0, run_id="rl-1")))
    assert m["applied"] and b.policy_version == 1 and list(b.ledger) == [0] and b.optimizer_steps == 1
    refs = save_checkpoint(b, tmp_path / "art", 0)
    assert refs["checkpoint"]["uri"].endswith("/runs/rl-1/checkpoints/step-0") and "/runs/rl-1/" in refs["checkpoint"]["uri"]


@pytest.mark.parametrize("other", ["rank", "model", "targets"])
def test_another_model_or_lora_shape_is_refused_naming_the_key(other, tmp_path):
    _, _, _, init = trained_origin("tiny", tmp_path, steps=1)
    if other == "rank":
        cfg = make_cfg("tiny", lora={"rank": 4, "alpha": 16})
        key = "lora.rank"
    elif other == "model":
        cfg = make_cfg("tiny", model={"config": {**TINY, "hidden_size": 32}})
        key = "model.config"
    else:
        cfg = make_cfg("tiny", lora={"target_modules": ["q_proj", "v_proj"]})
        key = "lora.target_modules"
    with pytest.raises(CheckpointError, match=rf"model.init_from sft-1@0: .*{key}"):
        prepare_init(init, cfg, None)


def test_a_corrupt_origin_is_refused_before_any_trainer_is_touched(tmp_path):
    _, _, refs, init = trained_origin("tiny", tmp_path, steps=1)
    f = Path(refs["adapter"]["uri"].removeprefix("file://")) / "adapter_model.safetensors"
    data = bytearray(f.read_bytes())
    data[-1] ^= 1
    f.write_bytes(bytes(data))
    with pytest.raises(ArtifactError, match="model.init_from sft-1@0"):
        prepare_init(init, make_cfg("tiny"), None)


def test_trainer_load_with_init_and_no_checkpoint(tmp_path):
    """The activity's command: init only where the run has no checkpoint; a checkpoint wins over it."""
    a, samples, _, init = trained_origin("tiny", tmp_path)
    cmds = TrainerCommands(tmp_path / "art", "w1")
    raw = {"model": {"config": TINY}, "lora": {"rank": 8, "alpha": 16}, "seq_len": 64, "micro_batch_tokens": 64, "device": "cpu"}
    out = cmds.load({"run_id": "rl-1", "trainer_config": raw, "init": init})
    assert out == {"step": -1, "policy_version": 0, "ledger": []}
    for k, v in snapshot(a).items():
        torch.testing.assert_close(snapshot(cmds.trainer)[k], v, rtol=0, atol=0)
    cmds.step({"run_id": "rl-1", "step": 0, **dict(zip(("batch", "manifest"), on_policy_batch(cmds.trainer, tmp_path, samples, 0, run_id="rl-1"))),})
    saved = cmds.save({"run_id": "rl-1", "step": 0})
    after = snapshot(cmds.trainer)
    # A reload from the run's own checkpoint ignores init (the workflow sends it only without one; this checks the order).
    out = cmds.load({"run_id": "rl-1", "trainer_config": raw, "checkpoint": saved["checkpoint"], "init": init})
    assert out["policy_version"] == 1
    for k, v in after.items():
        torch.testing.assert_close(snapshot(cmds.trainer)[k], v, rtol=0, atol=0)


def test_an_lr_0_step_from_init_leaves_its_adapter_byte_for_byte(tmp_path):
    """bench:learn's control is the warm start evaluated as it is: what an lr-0 run from it would
    train to. Here that run trains, with weight decay on, and its weights are the origin's exactly;
    the same step at the default lr moves them, so the comparison can fail."""
    a, samples, _, init = trained_origin("tiny", tmp_path)
    origin = snapshot(a)
    for lr, moves in ((0.0, False), (5e-3, True)):
        b = Trainer(f"rl-lr{lr}", make_cfg("tiny", optim={"lr": lr, "weight_decay": 0.1}))
        load_init_adapter(b, prepare_init(init, b.cfg, None))
        m = b.step(0, load_batch(*on_policy_batch(b, tmp_path, samples, 0, run_id=f"rl-lr{lr}")))
        assert m["applied"] and m["grad_norm"] > 0
        moved = [k for k, v in snapshot(b).items() if not torch.equal(origin[k], v)]
        assert bool(moved) is moves, (lr, moved[:3])


# -- the KL reference of a warm-started run -------------------------------------------------------

KL = {"loss": {"normalization": "token", "kl_coef": 0.1}}


def _k3_against_base(trainer: Trainer, batch) -> float:
    """Mean k3 of the policy's trained tokens against the base model (adapter disabled), computed here."""
    m = batch.loss_mask.bool()
    pol = torch.cat(trainer.sample_logprobs(batch))[m].double()
    with trainer.model.disable_adapter():
        base = torch.cat(trainer.sample_logprobs(batch))[m].double()
    d = base - pol
    return float((d.exp() - d - 1).mean())


def test_a_warm_started_runs_kl_reference_is_the_warm_start(tmp_path):
    # An origin trained hard enough that it is far from the base model.
    _, samples, _, init = trained_origin("tiny", tmp_path, steps=3, optim={"lr": 0.05})
    b = Trainer("rl-1", make_cfg("tiny", **KL))
    load_init_adapter(b, prepare_init(init, b.cfg, None))
    batch = load_batch(*on_policy_batch(b, tmp_path, samples, 0, run_id="rl-1"))
    # Against the base model (the reference before the fix) step 0's KL is far from 0...
    assert _k3_against_base(b, batch) > 1e-3
    # ...against the warm start, the policy at step 0, it is 0 up to fp32 noise.
    assert b.step(0, batch)["kl_ref"] < 1e-7


def test_the_warm_start_stays_the_kl_reference_after_a_resume_from_the_runs_checkpoint(tmp_path):
    _, samples, _, init = trained_origin("tiny", tmp_path, steps=3, optim={"lr": 0.05})
    cfg = make_cfg("tiny", **KL)
    b = Trainer("rl-1", cfg)
    load_init_adapter(b, prepare_init(init, cfg, None))
    b.step(0, load_batch(*on_policy_batch(b, tmp_path, samples, 0, run_id="rl-1")))
    saved = save_checkpoint(b, tmp_path / "art", 0)
    # A fresh trainer resumed from step 0's checkpoint (trainer.load sends no init then).
    c = Trainer("rl-1", cfg)
    restore_checkpoint(c, saved["checkpoint"])
    batch = load_batch(*on_policy_batch(b, tmp_path, samples, 1, run_id="rl-1"))
    against_base = _k3_against_base(c, batch)
    want, got = b.step(1, batch), c.step(1, batch)
    assert want["kl_ref"] > 1e-7  # the policy moved from the warm start at step 0
    assert got["kl_ref"] == pytest.approx(want["kl_ref"], rel=1e-5)
    assert got["kl_ref"] < 0.5 * against_base  # and its reference is not the base model


def _warm_start_rank(rank: int, world: int, init, refs) -> dict:
    tr = Trainer("rl-1", make_cfg("tiny", **KL))
    load_init_adapter(tr, prepare_init(init, tr.cfg, None))
    return {"metrics": tr.step(0, load_batch(*refs))}


def test_a_warm_started_runs_kl_reference_across_two_ranks(tmp_path):
    # Across ranks the reference is copied into each rank's own shards of the adapter.
    import dist_worker

    _, samples, _, init = trained_origin("tiny", tmp_path, steps=3, optim={"lr": 0.05})
    one = Trainer("rl-1", make_cfg("tiny", **KL))
    load_init_adapter(one, prepare_init(init, one.cfg, None))
    refs = on_policy_batch(one, tmp_path, samples, 0, run_id="rl-1")
    assert _k3_against_base(one, load_batch(*refs)) > 1e-3
    got = dist_worker.spawn(_warm_start_rank, 2, tmp_path, init, refs)["metrics"]
    assert got["kl_ref"] < 1e-7
    assert got["loss"] == pytest.approx(one.step(0, load_batch(*refs))["loss"], rel=1e-5, abs=1e-7)
