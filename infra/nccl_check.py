"""An all-reduce across the trainer's GPUs over NCCL, as `ratchet doctor` runs it on a GPU layout:

  CUDA_VISIBLE_DEVICES=0,1,2,3 torchrun --standalone --nproc-per-node 4 infra/nccl_check.py

Each rank adds its rank + 1; rank 0 prints one JSON line with the sum against N(N+1)/2, and the time.
Exits 1 when the sum is wrong (NCCL init or the collective failing exits non-zero on its own).
"""
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
dist.init_process_group("nccl", timeout=timedelta(seconds=60))
x = torch.full((1 << 20,), float(rank + 1), device="cuda")
t0 = time.perf_counter()
dist.all_reduce(x)
torch.cuda.synchronize()
dt = time.perf_counter() - t0
want = world * (world + 1) / 2
ok = bool(torch.all(x == want).item())
if rank == 0:
    print(json.dumps({"ok": ok, "world_size": world, "sum": x[0].item(), "want": want, "seconds": round(dt, 4),
                      "nccl": ".".join(map(str, torch.cuda.nccl.version()))}))
dist.destroy_process_group()
raise SystemExit(0 if ok else 1)
