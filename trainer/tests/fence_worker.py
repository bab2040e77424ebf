"""A trainer process whose step thread blocks inside a micro-batch while the process stays alive
(test_fence.py runs it): the worker's real trainer.step, the fault hook's sleep, a stand-in model,
and the process liveness thread with self-fencing on, as run_worker starts it.

  python fence_worker.py <liveness file> <marker> <stall_s>
"""

import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from temporalio.testing import ActivityEnvironment  # noqa: E402

from ratchet_trainer import commands as commands_mod  # noqa: E402
from ratchet_trainer import worker as worker_mod  # noqa: E402
from ratchet_trainer.liveness import ProcessLiveness  # noqa: E402


class StandInTrainer:
    run_id = "run"

    def applied(self, step, batch_sha256):
        return None

    def step(self, step, batch, heartbeat=None, batch_sha256=None):
        for mb in range(3):
            heartbeat({"step": step, "micro_batch": mb, "micro_batches": 3})  # the fault hook sleeps from micro-batch 1
        return {"step": step, "applied": True}


def main() -> None:
    alive, marker, stall_s = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    commands_mod.load_batch = lambda *_: SimpleNamespace()
    worker_mod.record_step_metrics = lambda _m: None
    liveness = ProcessLiveness(alive, every_s=0.05, fence=True).start()
    acts = worker_mod.TrainerActivities(Path(sys.argv[1]).parent, worker_id="fence-test", liveness=liveness)
    acts.trainer = StandInTrainer()
    refs = {"batch": {"uri": "file:///nonexistent/b", "sha256": "0" * 64, "bytes": 1},
            "manifest": {"uri": "file:///nonexistent/m", "sha256": "1" * 64, "bytes": 1}}
    step = threading.Thread(target=ActivityEnvironment().run, args=(acts.step, {
        **refs, "run_id": "run", "step": 0, "liveness": {"heartbeat_every_s": 0.05, "stall_s": stall_s}}), daemon=True)
    step.start()
    # The rest of the process stays alive and responsive: only the step thread is stuck.
    while True:
        time.sleep(0.05)
        print("main thread alive", marker.exists(), flush=True)


if __name__ == "__main__":
    main()
