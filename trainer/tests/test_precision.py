"""bf16 LoRA compute with fp32 master weights (CPU, bf16 tiny model)."""

import torch

from helpers import make_cfg, make_samples
from ratchet_trainer.core import Trainer, write_batch
from ratchet_trainer.core.batch import load_batch
from ratchet_trainer.core.checkpoint import restore_checkpoint, save_checkpoint


def _batch(tr, tmp_path, step, name):
    b, m = write_batch(tmp_path, name, make_samples(tr.vocab_size, seed=step),
                       {"run_id": "run", "step": step, "vocab_size": tr.vocab_size})
    return load_batch(b, m)


def _bf16(**over):
    return make_cfg("tiny", model={"dtype": "bfloat16", **over.pop("model", {})}, **over)


def test_adapter_computes_in_bf16_and_optimiser_steps_fp32_masters(tmp_path):
    tr = Trainer("run", _bf16())
    assert tr.master is not None
    assert all(p.dtype == torch.bfloat16 for p in tr.params)
    assert all(m.dtype == torch.float32 for m in tr.master.masters)
    opt_params = [p for g in tr.optimizer.param_groups for p in g["params"]]
    assert all(p.dtype == torch.float32 for p in opt_params)
    before = [m.detach().clone() for m in tr.master.masters]
    out = tr.step(0, _batch(tr, tmp_path, 0, "b0"))
    assert out["applied"] and out["grad_norm"] > 0
    changed = [not torch.equal(a, m) for a, m in zip(before, tr.master.masters)]
    assert any(changed)
    # The bf16 copies are the masters rounded, and no gradient is left behind.
    for p, m in zip(tr.params, tr.master.masters):
        assert torch.equal(p.detach(), m.detach().to(torch.bfloat16))
        assert p.grad is None and m.grad is None
    # Checkpoint state is the fp32 masters.
    state = tr.trainable_state()
    assert all(v.dtype == torch.float32 for v in state.values())


def test_master_keeps_updates_smaller_than_bf16_resolution(tmp_path):
    """lr so small that bf16 weights could not move: the fp32 masters still accumulate the updates."""
    tr = Trainer("run", _bf16(optim={"lr": 1e-7}))
    start = [m.detach().clone() for m in tr.master.masters]
    for s in range(2):
        tr.step(s, _batch(tr, tmp_path, s, f"b{s}"))
    moved = sum(int((m != s0).sum()) for m, s0 in zip(tr.master.masters, start))
    assert moved > 0


def test_fp32_lora_dtype_keeps_fp32_adapters():
    tr = Trainer("run", _bf16(model={"lora_dtype": "float32"}))
    assert tr.master is None
    assert all(p.dtype == torch.float32 for p in tr.params)


def test_bf16_gradients_close_to_fp32_adapter(tmp_path):
    """The same step, bf16-compute adapter vs fp32 adapter on the same bf16 base: same direction."""
    grads = []
    for lora_dtype in ("auto", "float32"):
        tr = Trainer("run", _bf16(model={"lora_dtype": lora_dtype}, optim={"max_grad_norm": 0.0}))
        out = tr.step(0, _batch(tr, tmp_path, 0, f"b-{lora_dtype}"))
        grads.append(out["grad_norm"])
    assert abs(grads[0] - grads[1]) / grads[1] < 0.05


def test_checkpoint_round_trip_restores_masters_exactly(tmp_path):
    tr = Trainer("run", _bf16())
    tr.step(0, _batch(tr, tmp_path, 0, "b0"))
    ref = save_checkpoint(tr, tmp_path / "art", 0)
    masters = [m.detach().clone() for m in tr.master.masters]
    fresh = Trainer("run", _bf16())
    restore_checkpoint(fresh, ref["checkpoint"])
    for a, b in zip(masters, fresh.master.masters):
        assert torch.equal(a, b)
    for p, m in zip(fresh.params, fresh.master.masters):
        assert p.dtype == torch.bfloat16 and torch.equal(p.detach(), m.detach().to(torch.bfloat16))
    # The next step is the same on both.
    b1 = _batch(tr, tmp_path, 1, "b1")
    assert tr.step(1, b1)["loss"] == fresh.step(1, b1)["loss"]
    for a, b in zip(tr.master.masters, fresh.master.masters):
        assert torch.equal(a, b)
