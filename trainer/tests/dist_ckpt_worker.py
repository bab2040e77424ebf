"""One rank of the 2-process gloo checkpoint test (test_distributed_checkpoint.py): sharded saves,
restores at another world size, results to a file."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import make_cfg  # noqa: E402
from ratchet_trainer.core import Trainer, restore_checkpoint, save_checkpoint  # noqa: E402
from ratchet_trainer.core.batch import load_batch  # noqa: E402
from ratchet_trainer.core.artifacts import dir_ref, uri_to_path  # noqa: E402
from ratchet_trainer.core.distributed import local_tensor  # noqa: E402
from ratchet_trainer.core.init_adapter import load_init_adapter, prepare_init  # noqa: E402


def cfg(lora_rank: int = 8):
    return make_cfg("tiny", optim={"max_grad_norm": 0.0},
                    lora={"rank": lora_rank, "alpha": 2 * lora_rank, "dropout": 0.0})


def whole_state(tr: Trainer) -> dict[str, torch.Tensor]:
    """The trainable tensors gathered whole (a collective: every rank, same order)."""
    return {k: local_tensor(v.detach()).clone() for k, v in tr.trainable_state().items()}


def optim_state(tr: Trainer) -> list[dict[str, torch.Tensor]]:
    """The optimiser's state per trainable parameter (in order), gathered whole."""
    return [{k: local_tensor(v).clone() for k, v in tr.optimizer.state[p].items()} for p in tr.params]


def rank_main(rank: int, world: int, init_file: str, out: str, root: str, refs0, refs1, single_ckpt, refs_warm) -> None:
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        res: dict = {}
        # A single-process checkpoint restored by 2 ranks, then their step 1.
        tr = Trainer("run", cfg())
        restore_checkpoint(tr, single_ckpt)
        res["whole_restored"] = {"ledger": sorted(tr.ledger), "optimizer_steps": tr.optimizer_steps}
        res["whole_step1"] = tr.step(1, load_batch(*refs1))
        res["whole_state1"] = whole_state(tr)

        # Step 0 on 2 ranks, a sharded save, and step 1 without a restart.
        tr = Trainer("run", cfg())
        tr.step(0, load_batch(*refs0))
        res["state0"] = whole_state(tr)
        res["optim0"] = optim_state(tr)
        res["ckpt"] = save_checkpoint(tr, Path(root), 0)
        res["step1"] = tr.step(1, load_batch(*refs1))
        res["state1"] = whole_state(tr)

        # The sharded checkpoint restored by 2 fresh ranks (the same world size).
        tr = Trainer("run", cfg())
        restore_checkpoint(tr, res["ckpt"]["checkpoint"])
        res["resumed_step1"] = tr.step(1, load_batch(*refs1))
        res["resumed_state1"] = whole_state(tr)

        # [model] init_from on 2 ranks: the single-process checkpoint's adapter as a new run's first
        # adapter (each rank keeps its shards), a fresh ledger, then its step 0.
        init = {"from": "run", "run_id": "run", "step": 0, "policy_version": 1, "checkpoint": single_ckpt,
                "adapter": dir_ref(uri_to_path(single_ckpt["uri"]) / "adapter")}
        tr = Trainer("warm", cfg())
        load_init_adapter(tr, prepare_init(init, tr.cfg, None))
        res["init_state"] = whole_state(tr)
        res["init_ledger"] = sorted(tr.ledger)
        res["init_step0"] = tr.step(0, load_batch(*refs_warm))
        res["init_state_after"] = whole_state(tr)

        # A sharded checkpoint of another adapter (LoRA rank 4), for the mismatch test.
        other = Trainer("run", cfg(lora_rank=4))
        other.step(0, load_batch(*refs0))
        res["other_ckpt"] = save_checkpoint(other, Path(root) / "other", 0)
        if rank == 0:
            torch.save(res, out)
    finally:
        dist.destroy_process_group()
