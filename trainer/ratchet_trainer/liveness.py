"""Heartbeats that measure liveness, and a watchdog that stops them when progress stops.

A Temporal heartbeat used to be sent per micro-batch, so a micro-batch slower than
the heartbeat timeout failed a healthy step. Now:

- a background thread heartbeats every `heartbeat_every_s` with the newest progress,
  whatever the step thread is doing (one long micro-batch, a checkpoint write);
- the step thread only reports progress (`Watchdog.progress`); when there has been
  none for `stall_s`, the heartbeat thread stops heartbeating and logs it once, so
  Temporal's heartbeat timeout fires and the activity is retried: a hung trainer,
  not only a dead one, is replaced;
- the process's liveness file (`ProcessLiveness`) is touched only while no running
  activity is stalled and the process runs at all, so something outside the
  process (src/stack/supervisor.ts, a systemd timer, a Kubernetes liveness probe)
  replaces a process that is frozen (SIGSTOP) or wedged, which cannot replace
  itself;
- self-fencing: when a watchdog fires in a process that still runs, the liveness
  thread reports it, stops touching the file and exits the process with
  `EXIT_STALLED` (75), so any process manager (systemd `Restart=always`, a
  Kubernetes Deployment, the stack's supervisor) starts a fresh trainer at once.
  A hung step holds the model and the trainer's lock: nothing else could use the
  process, and a replacement reloads the last checkpoint.

Heartbeating from another thread: the SDK's `activity.heartbeat` reads the activity
context from a contextvar of the activity thread. For thread-pool activities the
context's heartbeat function is thread-safe (it schedules onto the worker's event
loop), so the background thread runs `activity.heartbeat` inside a copy of the
activity thread's contextvars (`contextvars.copy_context()`), never touching SDK
internals.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import math
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio import activity

from .core.config import ConfigError

log = logging.getLogger("ratchet_trainer.liveness")

# Bounds shared with the run config (src/config/schema.ts LivenessConfig): the
# workflow's heartbeat timeout for trainer activities is 1 minute, so a beat at
# most every 20 s leaves room for two lost ones.
HEARTBEAT_EVERY_BOUNDS = (0.05, 20.0)
STALL_BOUNDS = (0.1, 24 * 3600.0)  # the run config (TS) asks more: these bounds admit test windows
DEFAULT_HEARTBEAT_EVERY_S = 10.0
# Sized for the CPU stack: one micro-batch there took over 2 minutes with rollouts beside it.
DEFAULT_STALL_S = 900.0
LIVENESS_FILE_ENV = "RATCHET_LIVENESS_FILE"
# The trainer's exit status when it fences itself (a watchdog fired): EX_TEMPFAIL, "try again".
# Documented in docs/liveness.md; the systemd units restart on it like on any other exit.
EXIT_STALLED = 75
# The trainer's exit status after a process fault (worker.py: an error it has no type for, such as a CUDA or
# NCCL runtime error, which may leave the process unusable): EX_PROTOCOL, told apart from a stall in the logs.
EXIT_FAULTED = 76


@dataclass(frozen=True)
class LivenessConfig:
    heartbeat_every_s: float = DEFAULT_HEARTBEAT_EVERY_S
    stall_s: float = DEFAULT_STALL_S

    @staticmethod
    def parse(raw: Any, where: str = "liveness") -> LivenessConfig:
        """From a request's `liveness` object ({heartbeat_every_s, stall_s}); absent keys take the defaults."""
        if raw is None:
            return LivenessConfig()
        if not isinstance(raw, dict):
            raise ConfigError(f"{where} must be an object {{heartbeat_every_s, stall_s}}, got {type(raw).__name__}")
        unknown = set(raw) - {"heartbeat_every_s", "stall_s"}
        if unknown:
            raise ConfigError(f"{where}: unknown key(s) {sorted(unknown)}. Fix: use heartbeat_every_s and stall_s only")
        every = _bounded(raw.get("heartbeat_every_s", DEFAULT_HEARTBEAT_EVERY_S), f"{where}.heartbeat_every_s", HEARTBEAT_EVERY_BOUNDS)
        stall = _bounded(raw.get("stall_s", DEFAULT_STALL_S), f"{where}.stall_s", STALL_BOUNDS)
        if stall <= 2 * every:
            raise ConfigError(f"{where}.stall_s ({stall}) must exceed twice heartbeat_every_s ({every}): "
                              "otherwise one late beat reads as a stall. Fix: raise stall_s")
        return LivenessConfig(heartbeat_every_s=every, stall_s=stall)


def _bounded(value: Any, key: str, bounds: tuple[float, float]) -> float:
    lo, hi = bounds
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not lo <= value <= hi:
        raise ConfigError(f"{key} must be a number of seconds in [{lo}, {hi}], got {value!r}")
    return float(value)


class Watchdog:
    """One activity's progress clock: `progress()` on every unit of work, `stalled()` once none came for `stall_s`."""

    def __init__(self, name: str, stall_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self.stall_s = stall_s
        self._clock = clock
        self._last = clock()
        self._details: Any = {"phase": "started"}
        self._stalled_at: float | None = None
        self._waiting = 0
        self._mu = threading.Lock()

    def progress(self, details: Any = None) -> None:
        with self._mu:
            if self._stalled_at is not None:
                # The verdict stands: heartbeats stopped and Temporal has (or will have) retried the
                # attempt elsewhere; reviving them would make two attempts look alive.
                return
            self._last = self._clock()
            if details is not None:
                self._details = details

    @property
    def details(self) -> Any:
        with self._mu:
            return self._details

    def idle_s(self) -> float:
        with self._mu:
            return self._clock() - self._last

    @contextlib.contextmanager
    def waiting(self, details: Any) -> Iterator[None]:
        """A wait for another activity (the trainer's lock), not work of this one: no stall is judged meanwhile.

        The activity holding what this one waits for has its own watchdog; counting the queue as this
        activity's silence reported a live trainer dead whenever a call queued behind a long one for a
        stall window. The window starts again when the wait ends.
        """
        with self._mu:
            self._waiting += 1
            if self._stalled_at is None:
                self._details = details
        try:
            yield
        finally:
            with self._mu:
                self._waiting -= 1
                self._last = self._clock()

    def stalled(self) -> bool:
        """True from the first check past the window on; the first such check logs the stall."""
        with self._mu:
            if self._stalled_at is None and not self._waiting and self._clock() - self._last > self.stall_s:
                self._stalled_at = self._clock()
                log.error("no progress within the stall window; heartbeats stop so Temporal retries this activity "
                          "and the process reports itself not live",
                          extra={"activity": self.name, "stall_s": self.stall_s, "last_progress": self._details,
                                 "idle_s": round(self._clock() - self._last, 1)})
            return self._stalled_at is not None


class ProcessLiveness:
    """The process's liveness signal: a file whose mtime is fresh while the process runs and no activity is stalled.

    A supervisor (src/stack/supervisor.ts, a systemd timer, a Kubernetes probe) reads its age; a frozen or wedged
    process stops touching it. With `fence`, a process whose activity stalled does not wait for that: the liveness
    thread exits it with `EXIT_STALLED` (self-fencing).
    """

    def __init__(self, path: Path | None, every_s: float = 5.0, fence: bool = False,
                 exit: Callable[[int], Any] = os._exit) -> None:
        self.path = path
        self.every_s = every_s
        self.fence = fence
        self._exit = exit
        self._watchdogs: set[Watchdog] = set()
        self._mu = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def register(self, wd: Watchdog) -> None:
        with self._mu:
            self._watchdogs.add(wd)

    def unregister(self, wd: Watchdog) -> None:
        with self._mu:
            self._watchdogs.discard(wd)

    def healthy(self) -> bool:
        with self._mu:
            watchdogs = list(self._watchdogs)
        return not any(wd.stalled() for wd in watchdogs)

    def beat(self) -> bool:
        """Touch the file if healthy; returns whether it did."""
        if not self.healthy():
            return False
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.touch()
            os.utime(self.path)
        return True

    def start(self) -> ProcessLiveness:
        if self._thread is None:
            self.beat()
            self._thread = threading.Thread(target=self._run, name="ratchet-liveness", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def stalled_activities(self) -> list[Watchdog]:
        with self._mu:
            watchdogs = list(self._watchdogs)
        return [wd for wd in watchdogs if wd.stalled()]

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                if not self.beat() and self.fence:
                    self.fence_now()
                    return
            except OSError as e:  # a full disk must not kill the trainer; the supervisor sees a stale file
                log.warning("could not touch the liveness file", extra={"path": str(self.path), "error": str(e)})
            except Exception as e:  # noqa: BLE001 - this thread is the process's liveness: it must not die
                log.exception("liveness check failed; trying again next period", extra={"error": repr(e)})

    def fence_now(self, code: int = EXIT_STALLED, why: str | None = None) -> None:
        """Report this process dead and exit it with `code` (EXIT_STALLED), so its process manager starts a new one.

        The hung thread cannot be stopped from here (Python threads cannot be killed, and a step stuck in a
        collective or a kernel never returns), and it holds the model and the trainer's lock: the process is of
        no further use. Temporal already stopped getting this activity's heartbeats; the workflow re-announces
        and the new process loads the last checkpoint.
        """
        if why is None:
            stalled = [{"activity": wd.name, "stall_s": wd.stall_s, "last_progress": wd.details} for wd in self.stalled_activities()]
            log.critical("an activity stalled: the trainer fences itself (exits) so its process manager restarts it",
                         extra={"stalled": stalled, "exit_code": code, "liveness_file": str(self.path)})
        else:
            log.critical("the trainer fences itself (exits) so its process manager restarts it",
                         extra={"why": why, "exit_code": code, "liveness_file": str(self.path)})
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink()  # dead now, not in up to a staleness window
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        self._exit(code)


class Heartbeater:
    """Sends `watchdog.details` through `send` every `every_s` from a daemon thread until stopped or stalled."""

    def __init__(self, watchdog: Watchdog, send: Callable[[Any], None], every_s: float) -> None:
        self.watchdog = watchdog
        self.every_s = every_s
        self._send = send
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"heartbeat-{watchdog.name}", daemon=True)
        self.sent = 0

    def start(self) -> Heartbeater:
        self._beat()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _beat(self) -> None:
        if self.watchdog.stalled():
            return
        try:
            self._send(self.watchdog.details)
            self.sent += 1
        except Exception as e:  # noqa: BLE001 - a heartbeat that fails (loop busy, activity done) is retried next tick
            log.warning("heartbeat failed", extra={"activity": self.watchdog.name, "error": repr(e)})

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._beat()


@contextlib.contextmanager
def activity_liveness(name: str, cfg: LivenessConfig, process: ProcessLiveness | None = None,
                      clock: Callable[[], float] = time.monotonic) -> Iterator[Watchdog]:
    """Call from the activity's own thread: heartbeats on a timer for the duration of the block.

    The block reports progress with `watchdog.progress(details)`; the latest details ride on every heartbeat.
    """
    ctx = contextvars.copy_context()
    wd = Watchdog(name, cfg.stall_s, clock)
    if process is not None:
        process.register(wd)
    hb = Heartbeater(wd, lambda details: ctx.run(activity.heartbeat, details), cfg.heartbeat_every_s).start()
    try:
        yield wd
    finally:
        hb.stop()
        if process is not None:
            process.unregister(wd)


def liveness_file_from_env() -> Path | None:
    raw = os.environ.get(LIVENESS_FILE_ENV)
    return Path(raw) if raw else None
