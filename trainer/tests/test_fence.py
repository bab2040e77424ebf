"""Self-fencing: a trainer whose step thread hangs while the rest of the process lives exits with
EXIT_STALLED (docs/liveness.md), so any process manager (systemd Restart=always, a Kubernetes
Deployment) replaces it without Ratchet's own supervisor."""

import subprocess
import sys
import time
from pathlib import Path

from ratchet_trainer import worker as worker_mod
from ratchet_trainer.liveness import EXIT_STALLED, LivenessConfig, ProcessLiveness, activity_liveness
from helpers import wait_for

HERE = Path(__file__).resolve().parent


def test_a_trainer_whose_step_thread_hangs_exits_with_the_documented_code(tmp_path):
    alive, marker = tmp_path / "trainer.alive", tmp_path / "fault.marker"
    env = {"PATH": "/usr/bin:/bin", worker_mod.FAULT_SLEEP_ENV: "60", worker_mod.FAULT_MARKER_ENV: str(marker)}
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(HERE / "fence_worker.py"), str(alive), str(marker), "0.5"],
                          env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - t0
    assert proc.returncode == EXIT_STALLED == 75, proc.stderr[-3000:]
    assert marker.exists(), "the step thread never reached the blocked micro-batch"
    assert "main thread alive True" in proc.stdout  # hung inside the micro-batch, the rest of the process running
    assert "fences itself" in proc.stderr
    assert not alive.exists()  # reported dead at once, not after a staleness window
    assert took < 30, f"fenced after {took:.1f}s; the 60 s micro-batch was never waited out"


def test_without_fencing_a_stall_only_stops_the_liveness_file(tmp_path):
    exits: list[int] = []
    liveness = ProcessLiveness(tmp_path / "alive", every_s=0.02, fence=False, exit=exits.append).start()
    try:
        with activity_liveness("trainer.step", LivenessConfig(heartbeat_every_s=0.05, stall_s=0.2), liveness):
            time.sleep(0.6)
            assert not liveness.healthy()
    finally:
        liveness.stop()
    assert exits == []


def test_fencing_exits_once_through_the_given_exit(tmp_path):
    exits: list[int] = []
    liveness = ProcessLiveness(tmp_path / "alive", every_s=0.02, fence=True, exit=exits.append).start()
    with activity_liveness("trainer.step", LivenessConfig(heartbeat_every_s=0.05, stall_s=0.2), liveness):
        assert wait_for(lambda: exits), "the liveness thread never fenced the stalled process"
        time.sleep(0.2)  # a second period: it must not exit twice
    liveness.stop()
    assert exits == [EXIT_STALLED]
