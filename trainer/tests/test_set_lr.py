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
