"""`ratchet set --lr` on a running run (src/workflows/runControl.ts): trainer.step's `lr` reaches the
optimizer from that step on, shows in the step's metrics, and survives a checkpoint round trip."""

import pytest

from ratchet_trainer.core import BatchError, Trainer, load_batch, restore_checkpoint, save_checkpoint
from helpers import make_cfg, make_samples, on_policy_batch


def test_set_lr_reaches_the_optimizer_metrics_and_checkpoint(tmp_path):
    trainer = Trainer("run", make_cfg("tiny"))
    before = trainer.cfg.optim.lr
    trainer.set_lr(before / 2)
    assert all(g["lr"] == before / 2 for g in trainer.optimizer.param_groups)
    m = trainer.step(0, load_batch(*on_policy_batch(trainer, tmp_path, make_samples(trainer.vocab_size), 0)))
    assert m["lr"] == before / 2
    refs = save_checkpoint(trainer, tmp_path / "art", 0)
    again = Trainer("run", make_cfg("tiny"))
    restore_checkpoint(again, refs["checkpoint"])
    assert all(g["lr"] == before / 2 for g in again.optimizer.param_groups)


@pytest.mark.parametrize("bad", [-1e-5, float("nan"), 2.0, "0.1", True])
def test_set_lr_refuses_what_the_workflow_would_refuse(bad):
    trainer = Trainer("run", make_cfg("tiny"))
    with pytest.raises(BatchError, match="lr must be a number from 0 to 1"):
        trainer.set_lr(bad)


def test_step_reports_its_cpu_and_gpu_seconds(tmp_path):
    """The cost ledger's trainer figures: CPU time of this process, bounded by the step's wall time x cores."""
    import os
    import time

    from ratchet_trainer.core.trainer import step_cost
    import torch

    trainer = Trainer("run", make_cfg("tiny"))
    batch = load_batch(*on_policy_batch(trainer, tmp_path, make_samples(trainer.vocab_size), 0))
    cpu0, wall0 = time.process_time(), time.monotonic()
    m = trainer.step(0, batch)
    cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
    assert 0 < m["cpu_s"] <= cpu + 1e-3
    assert m["cpu_s"] <= wall * (os.cpu_count() or 1) + 1e-3
    assert m["gpu_s"] == 0.0  # a CPU trainer holds no GPU
    assert step_cost(torch.device("cuda"), 2.0, 1.5, 4) == {"cpu_s": 1.5, "gpu_s": 8.0}
