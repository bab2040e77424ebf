"""One rank of test_ranks.py: TrainerCommands in lockstep over 2 gloo processes, rank 0 leading."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from helpers import make_cfg  # noqa: E402
from ratchet_trainer import commands as commands_mod  # noqa: E402
from ratchet_trainer.commands import TrainerCommands, follow  # noqa: E402
from ratchet_trainer.core.store import StoreUnavailable  # noqa: E402
from ratchet_trainer.ranks import RankFailed, Ranks  # noqa: E402


def rank_main(rank: int, world: int, init_file: str, out: str, artifacts: str, b0, b1) -> None:
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1"})
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    ranks = Ranks()  # the default group exists: only the control group is made
    cmds = TrainerCommands(Path(artifacts), f"rank {rank}", ranks)
    if rank == 1:
        # This rank alone cannot read step 1's batch the first time (its store is down).
        real, calls = commands_mod.load_batch, []

        def flaky(*a, **k):
            calls.append(1)
            if len(calls) == 2:
                raise StoreUnavailable("the store did not answer (test)")
            return real(*a, **k)

        commands_mod.load_batch = flaky
        follow(ranks, cmds)
        dist.destroy_process_group()
        return
    req = {"run_id": "run", "trainer_config": make_cfg("tiny", optim={"max_grad_norm": 0.0}).to_dict(), "checkpoint": None}
    res: dict = {"load": cmds.load(req)}
    m0, _ = cmds.step({"run_id": "run", "step": 0, "batch": b0[0], "manifest": b0[1]})
    res["m0"] = m0
    try:
        cmds.step({"run_id": "run", "step": 1, "batch": b1[0], "manifest": b1[1]})
        res["rank_failed"] = None
    except RankFailed as e:
        res["rank_failed"] = {"type": e.error_type, "message": str(e)}
    res["ledger_after_failure"] = sorted(cmds.trainer.ledger)
    m1, _ = cmds.step({"run_id": "run", "step": 1, "batch": b1[0], "manifest": b1[1]})  # the retry: both ranks read it
    res["m1"] = m1
    res["saved"] = cmds.save({"run_id": "run", "step": 1})
    cmds.stop_followers()
    torch.save(res, out)
    dist.destroy_process_group()
