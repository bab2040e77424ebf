"""One node of the two-host torchrun test (test_multinode.py): started by torchrun on its own
network namespace, one rank per host, gloo over the bridge. Rank 0 writes the step's results."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dist_worker import run_step  # noqa: E402
from helpers import make_cfg  # noqa: E402
from ratchet_trainer.core import Trainer  # noqa: E402


def main(shared: str) -> None:
    dist.init_process_group("gloo")  # torchrun's env: RANK, WORLD_SIZE, MASTER_ADDR over the bridge
    try:
        hosts: list = [None] * dist.get_world_size()
        dist.all_gather_object(hosts, os.environ.get("RATCHET_HOST_NAME"))
        refs = torch.load(Path(shared) / "refs.pt", weights_only=False)
        res = run_step(Trainer("run", make_cfg("tiny", optim={"max_grad_norm": 0.0})), refs)
        if dist.get_rank() == 0:
            torch.save({**res, "hosts": hosts}, Path(shared) / "rank0.pt")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
