"""One rank of the 2-process gloo test (test_distributed.py): a step under FSDP2, results to a file."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import make_cfg  # noqa: E402
from ratchet_trainer.core import Trainer  # noqa: E402
from ratchet_trainer.core.batch import BatchError, load_batch  # noqa: E402
from ratchet_trainer.core.distributed import local_tensor  # noqa: E402


def capture_grads(tr: Trainer) -> dict[str, torch.Tensor]:
    grads: dict[str, torch.Tensor] = {}
    named = [(n, p) for n, p in tr.model.named_parameters() if p.requires_grad]

    def snap(*_):  # on every rank, same order: full_tensor is a collective
        for n, p in named:
            grads[n] = local_tensor(p.grad.detach()).clone()

    tr.optimizer.register_step_pre_hook(snap)
    return grads


def assert_same_step(single: dict, dual: dict, metrics=("loss", "entropy", "tokens", "grad_norm")) -> None:
    """Ranks' step (rank 0's results) against one process's: metrics, every gradient, the update.
    fp32: one process sums its micro-batches in another order than the ranks' reduced parts
    (trajectory units decide the micro-batches), so single elements differ in the last bits
    (~1e-7), and so do the updated weights."""
    for k in metrics:
        assert abs(single["metrics"][k] - dual["metrics"][k]) <= 1e-6 * max(1.0, abs(single["metrics"][k])), k
    assert single["grads"].keys() == dual["grads"].keys() and single["grads"]
    for k, g in single["grads"].items():
        torch.testing.assert_close(dual["grads"][k], g, rtol=1e-5, atol=5e-7)
    for k, v in single["state"].items():
        torch.testing.assert_close(dual["state"][k], v, rtol=1e-5, atol=5e-7)


def run_step(tr: Trainer, refs) -> dict:
    grads = capture_grads(tr)
    metrics = tr.step(0, load_batch(*refs))
    state = {k: local_tensor(v.detach()).clone() for k, v in tr.trainable_state().items()}
    return {"metrics": metrics, "grads": grads, "state": state}


def rank_main(rank: int, world: int, init_file: str, out: str, refs, odd_refs) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        tr = Trainer("run", make_cfg("tiny", optim={"max_grad_norm": 0.0}))
        # A batch the ranks cannot split fails before any work, and the trainer is unchanged.
        try:
            tr.step(0, load_batch(*odd_refs))
            odd_error = None
        except BatchError as e:
            odd_error = str(e)
        unchanged = tr.ledger == {} and tr.optimizer_steps == 0
        res = run_step(tr, refs)
        if rank == 0:
            torch.save({**res, "odd_error": odd_error, "unchanged": unchanged}, out)
    finally:
        dist.destroy_process_group()


def pretrained_cfg(model_dir: str):
    return make_cfg("tiny", model={"path": model_dir, "config": None}, optim={"max_grad_norm": 0.0})


def rank_main_pretrained(rank: int, world: int, init_file: str, out: str, refs, model_dir: str) -> None:
    """A model from model.path across ranks: only rank 0 may read its weights (sharded_init.py)."""
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        if rank != 0:
            import transformers

            def refuse(*a, **k):
                raise AssertionError(f"rank {rank} read the weights: only rank 0 may")
            transformers.AutoModelForCausalLM.from_pretrained = refuse
        tr = Trainer("run", pretrained_cfg(model_dir))
        on_meta = [n for n, p in tr.model.named_parameters() if local_tensor(p.detach()).is_meta]
        res = run_step(tr, refs)
        if rank == 0:
            torch.save({**res, "on_meta": on_meta}, out)
    finally:
        dist.destroy_process_group()
