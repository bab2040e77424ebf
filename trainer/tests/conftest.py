import os
import sys
from pathlib import Path

# One thread per process, here and in every process a test starts (workers, ranks, replays), set before torch
# loads: the tiny models gain nothing from a second thread, and on CI's two shared cores OpenMP's threads
# spin at their barriers while the other core is busy. several_updates' single-process steps took 13.5 CPU-s
# with two threads under load, 0.5 with one.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from torch._inductor.runtime.cache_dir_utils import default_cache_dir  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
# Inductor's cache (the FlexAttention test's kernels) does not tell thread counts apart, and a kernel compiled
# under one thread aborts a two-thread process that loads it (torch 2.11, seen here; the other way round works):
# a cache per thread count, so a run of older tests (two threads) on the same machine cache never meets it.
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or default_cache_dir(),
                                                     f"threads-{torch.get_num_threads()}")
