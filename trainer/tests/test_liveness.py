"""Heartbeats on a timer and the stall watchdog (ratchet_trainer.liveness), through the SDK's
ActivityEnvironment (the real activity context, heartbeats captured) and the worker's real
trainer.step activity with a stand-in model whose micro-batch is slow or hangs."""

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from temporalio.testing import ActivityEnvironment

from ratchet_trainer import commands as commands_mod
from ratchet_trainer import worker as worker_mod
from ratchet_trainer.core.config import ConfigError
from ratchet_trainer.liveness import LivenessConfig, ProcessLiveness, Watchdog, activity_liveness
from helpers import wait_for


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_watchdog_stalls_after_the_window_and_the_verdict_stands():
    clock = FakeClock()
    wd = Watchdog("trainer.step", stall_s=60, clock=clock)
    clock.t += 59
    assert not wd.stalled()
    wd.progress({"micro_batch": 1})
    clock.t += 60
    assert not wd.stalled()  # 60 s since the last progress: not past the window yet
    clock.t += 1
    assert wd.stalled()
    wd.progress({"micro_batch": 2})  # late progress cannot revive an attempt Temporal has given up on
    assert wd.stalled()
    assert wd.details == {"micro_batch": 1}


@pytest.mark.parametrize("raw,key", [
    ({"heartbeat_every_s": 0}, "heartbeat_every_s"),
    ({"heartbeat_every_s": 60}, "heartbeat_every_s"),
    ({"stall_s": "10"}, "stall_s"),
    ({"stall_s": 0.05}, "stall_s"),
    ({"heartbeat_every_s": 10, "stall_s": 15}, "stall_s"),
    ({"stal_s": 10}, "unknown key"),
])
def test_liveness_config_rejects_out_of_bounds_naming_the_key(raw, key):
    with pytest.raises(ConfigError, match=key):
        LivenessConfig.parse(raw, "trainer.step liveness")


def test_liveness_config_defaults_fit_the_cpu_stack():
    cfg = LivenessConfig.parse(None)
    assert cfg.heartbeat_every_s == 10 and cfg.stall_s == 900
    assert LivenessConfig.parse({"stall_s": 30}).stall_s == 30


def _beats(env: ActivityEnvironment) -> list[tuple[float, object, str]]:
    beats: list[tuple[float, object, str]] = []
    env.on_heartbeat = lambda *d: beats.append((time.monotonic(), d[0] if d else None, threading.current_thread().name))
    return beats


def test_heartbeats_keep_coming_while_the_work_sends_none():
    env = ActivityEnvironment()
    beats = _beats(env)
    window: list[float] = []

    def work() -> None:
        with activity_liveness("trainer.step", LivenessConfig(heartbeat_every_s=0.05, stall_s=5)) as live:
            live.progress({"micro_batch": 1})
            window.append(time.monotonic())
            time.sleep(1.0)  # one long micro-batch: the activity thread says nothing
            window.append(time.monotonic())

    env.run(work)
    during = [b for b in beats if window[0] < b[0] < window[1]]
    assert len(during) >= 5, beats  # 20 on an idle machine; a loaded one still gets several
    assert beats[-1][1] == {"micro_batch": 1}  # the latest progress rides on every beat
    assert all(name != threading.current_thread().name for _, _, name in beats[1:])


def test_heartbeats_stop_once_no_progress_came_within_the_stall_window():
    env = ActivityEnvironment()
    beats = _beats(env)
    liveness = ProcessLiveness(None)
    seen: dict[str, float] = {}

    def work() -> None:
        with activity_liveness("trainer.step", LivenessConfig(heartbeat_every_s=0.05, stall_s=0.3), liveness) as live:
            live.progress({"micro_batch": 1})
            # hung: no progress. The stall is judged 0.3 s on; wait for it, then stay hung a while longer.
            if wait_for(lambda: not liveness.healthy()):
                seen["unhealthy_at"] = time.monotonic()
            time.sleep(0.5)

    env.run(work)
    assert "unhealthy_at" in seen, "the watchdog never judged the hung activity stalled"
    after_stall = [b for b in beats if b[0] > seen["unhealthy_at"]]
    # At most one beat that had passed its stall check before the verdict lands after it; none come later.
    assert len(beats) >= 2 and len(after_stall) <= 1, beats
    assert liveness.healthy()  # the stalled activity ended: the process is live again


def test_liveness_file_is_touched_only_while_no_activity_is_stalled(tmp_path: Path):
    f = tmp_path / "trainer.alive"
    clock = FakeClock()
    liveness = ProcessLiveness(f)
    assert liveness.beat() and f.exists()
    wd = Watchdog("trainer.step", stall_s=10, clock=clock)
    liveness.register(wd)
    f.unlink()
    clock.t += 5
    assert liveness.beat() and f.exists()
    f.unlink()
    clock.t += 6
    assert not liveness.beat() and not f.exists()
    liveness.unregister(wd)
    assert liveness.beat() and f.exists()


class SlowTrainer:
    """Stands in for the model: micro-batch 1 takes `slow_s`, reporting nothing meanwhile (`window` records when)."""

    def __init__(self, slow_s: float) -> None:
        self.run_id = "run"
        self.ledger: dict[int, dict] = {}
        self.slow_s = slow_s
        self.window: list[float] = []

    def applied(self, step, batch_sha256):
        return None  # as Trainer.applied: the step is new

    def step(self, step, batch, heartbeat=None, batch_sha256=None):
        heartbeat({"step": step, "micro_batch": 0, "micro_batches": 2})
        self.window.append(time.monotonic())
        self.hang()
        self.window.append(time.monotonic())
        heartbeat({"step": step, "micro_batch": 1, "micro_batches": 2})
        heartbeat({"step": step, "micro_batch": 2, "micro_batches": 2})
        return {"step": step, "applied": False}

    def hang(self) -> None:
        time.sleep(self.slow_s)


class HungTrainer(SlowTrainer):
    """Micro-batch 1 hangs until the process's liveness reports it stalled, then a while longer."""

    def __init__(self, liveness: ProcessLiveness) -> None:
        super().__init__(slow_s=0)
        self.liveness = liveness
        self.unhealthy_at: float | None = None

    def hang(self) -> None:
        if wait_for(lambda: not self.liveness.healthy()):
            self.unhealthy_at = time.monotonic()
        time.sleep(0.5)


# trainer.step checks its refs before loading (commands.load_batch is stubbed below): well-formed stand-ins.
_BATCH_REFS = {
    "batch": {"uri": "file:///nonexistent/batch.safetensors", "sha256": "0" * 64, "bytes": 1},
    "manifest": {"uri": "file:///nonexistent/manifest.json", "sha256": "1" * 64, "bytes": 1},
}


def _acts(tmp_path: Path, monkeypatch, slow_s: float):
    monkeypatch.setattr(commands_mod, "load_batch", lambda *_: SimpleNamespace())
    acts = worker_mod.TrainerActivities(tmp_path, worker_id="test", liveness=ProcessLiveness(None))
    acts.trainer = SlowTrainer(slow_s)
    return acts


def test_trainer_step_heartbeats_through_a_slow_micro_batch(tmp_path, monkeypatch):
    """The bug seen on the CPU: a micro-batch longer than the heartbeat timeout failed the step.
    Heartbeats must keep coming while the micro-batch runs."""
    acts = _acts(tmp_path, monkeypatch, slow_s=1.0)
    env = ActivityEnvironment()
    beats = _beats(env)
    env.run(acts.step, {**_BATCH_REFS, "run_id": "run", "step": 0, "liveness": {"heartbeat_every_s": 0.1, "stall_s": 5}})
    start, end = acts.trainer.window
    during = [b for b in beats if start < b[0] < end]
    assert len(during) >= 3, beats  # 10 on an idle machine
    assert all(b[1]["micro_batch"] == 0 for b in during)


def test_trainer_step_fault_sleep_is_a_slow_micro_batch_that_heartbeats_from_the_timer(tmp_path, monkeypatch):
    acts = _acts(tmp_path, monkeypatch, slow_s=0)
    marker = tmp_path / "marker"
    monkeypatch.setenv(worker_mod.FAULT_SLEEP_ENV, "0.8")
    monkeypatch.setenv(worker_mod.FAULT_MARKER_ENV, str(marker))
    env = ActivityEnvironment()
    beats = _beats(env)
    step_thread = []
    orig = acts.trainer.step
    acts.trainer.step = lambda *a, **k: (step_thread.append(threading.current_thread().name), orig(*a, **k))[1]
    env.run(acts.step, {**_BATCH_REFS, "run_id": "run", "step": 0, "liveness": {"heartbeat_every_s": 0.1, "stall_s": 5}})
    assert marker.exists()
    from_step_thread = [b for b in beats if b[2] == step_thread[0]]
    assert len(beats) >= 3 and len(from_step_thread) <= 1, beats


def test_trainer_step_that_hangs_stops_heartbeating_and_marks_the_process_not_live(tmp_path, monkeypatch):
    acts = _acts(tmp_path, monkeypatch, slow_s=0)
    acts.trainer = HungTrainer(acts.liveness)
    env = ActivityEnvironment()
    beats = _beats(env)
    env.run(acts.step, {**_BATCH_REFS, "run_id": "run", "step": 0, "liveness": {"heartbeat_every_s": 0.05, "stall_s": 0.4}})
    assert acts.trainer.unhealthy_at is not None, "the hung step never made the process report itself not live"
    # At most one beat that had passed its stall check before the verdict lands after it; none come later.
    assert len([b for b in beats if b[0] > acts.trainer.unhealthy_at]) <= 1, beats


def test_trainer_step_rejects_a_bad_liveness_window(tmp_path, monkeypatch):
    from temporalio.exceptions import ApplicationError

    acts = _acts(tmp_path, monkeypatch, slow_s=0)
    with pytest.raises(ApplicationError, match="stall_s"):
        ActivityEnvironment().run(acts.step, {**_BATCH_REFS, "run_id": "run", "step": 0, "liveness": {"stall_s": -1}})


class BusyTrainer:
    """Stands in for the model: a long step that reports progress every micro-batch (healthy, just long)."""

    run_id = "run"

    def __init__(self, micro_batches: int, each_s: float) -> None:
        self.micro_batches, self.each_s = micro_batches, each_s

    def applied(self, step, batch_sha256):
        return None

    def step(self, step, batch, heartbeat=None, batch_sha256=None):
        for mb in range(self.micro_batches):
            heartbeat({"step": step, "micro_batch": mb, "micro_batches": self.micro_batches})
            time.sleep(self.each_s)
        return {"step": step, "applied": False}


def test_a_call_queued_behind_a_long_healthy_one_is_not_a_stall(tmp_path, monkeypatch):
    """Hole 10 (issue 25): a trainer was reported not live (and killed by the supervisor) though it was
    not hung. A call that waits for the trainer's lock, queued behind another call (a retried attempt
    behind the one still running, the next run's load behind the end of the last), counted the wait
    as its own silence: after one stall window the process stopped touching its liveness file, and
    now that a stall fences the process, it would exit. The wait is not a stall; the holder has its own watchdog."""
    monkeypatch.setattr(commands_mod, "load_batch", lambda *_: SimpleNamespace())
    acts = worker_mod.TrainerActivities(tmp_path, worker_id="test", liveness=ProcessLiveness(None))
    acts.trainer = BusyTrainer(micro_batches=12, each_s=0.1)  # 1.2 s, progress every 0.1 s
    acts.commands.save = lambda req: {"saved": req["step"]}
    live = {"heartbeat_every_s": 0.05, "stall_s": 0.4}
    step_env, save_env = ActivityEnvironment(), ActivityEnvironment()
    save_beats = _beats(save_env)
    step = threading.Thread(target=step_env.run, args=(acts.step, {**_BATCH_REFS, "run_id": "run", "step": 0, "liveness": live}))
    step.start()
    time.sleep(0.1)
    out: list = []
    save = threading.Thread(target=lambda: out.append(save_env.run(acts.save, {"run_id": "run", "step": 0, "liveness": live})))
    save.start()
    healthy = []
    while step.is_alive():
        healthy.append(acts.liveness.healthy())
        time.sleep(0.05)
    step.join()
    save.join(10)
    assert out == [{"saved": 0}]
    assert healthy and all(healthy), healthy
    # The queued call kept heartbeating meanwhile: Temporal sees it alive, waiting.
    assert len(save_beats) >= 5, save_beats  # ~24 on an idle machine
    assert any(b[1] == {"phase": "waiting for the trainer (another call holds it)"} for b in save_beats)


def test_the_liveness_thread_survives_an_unexpected_error(tmp_path):
    """The file is the process's liveness: one failed check must not stop it for good."""
    f = tmp_path / "alive"
    liveness = ProcessLiveness(f, every_s=0.02)
    calls = {"n": 0}
    orig = liveness.healthy

    def flaky() -> bool:
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("boom")
        return orig()

    liveness.healthy = flaky
    liveness.start()
    try:
        assert wait_for(lambda: calls["n"] > 2), "the liveness thread stopped checking after the error"
        f.unlink()
        assert wait_for(f.exists), "the liveness thread no longer touches its file"
    finally:
        liveness.stop()
