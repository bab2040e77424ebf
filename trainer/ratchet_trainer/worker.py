"""The trainer as a Temporal activity worker (worker-specific task queue pattern).

It polls the shared queue `ratchet-trainer` for `trainer.announce` only, which
answers with this process's own queue, and only to the run that holds (or now
claims) its lease (lease.py): a trainer belongs to one run at a time; `trainer.load`, `trainer.step` and
`trainer.save` go to that queue, so every call of a run reaches the process
that holds its model in memory. If this process dies, its queue goes quiet; the
workflow announces again, and the new worker first loads the last checkpoint.

  python -m ratchet_trainer.worker --address 127.0.0.1:7233
  torchrun --nproc-per-node 2 -m ratchet_trainer.worker ...   (one trainer over 2 GPUs: ranks.py)
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import functools
import ctypes
import ctypes.util
import json
import logging
import os
import socket
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from datetime import timedelta
from typing import Any, Awaitable, Callable, Iterator

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.exceptions import ApplicationError, FailureError
from temporalio.service import RPCError, RPCStatusCode
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig
from temporalio.worker import Worker

from . import connection
from .commands import TrainerCommands, TrainerNotLoaded, follow
from .core.artifacts import ArtifactError
from .core.batch import BatchError
from .core.config import ConfigError, newer_than_this_code
from .core.errors import CheckpointError
from .core.io_progress import io_progress
from .core.store import DiskFull, StoreConfigError, StoreUnavailable, cache_limit_bytes, disk_full
from .core.trainer import (NonFiniteGradientError, StepConflictError, StepOrderError, StepOutOfMemoryError,
                           StepPartitionError, Trainer)
from .lease import DEFAULT_LEASE_TTL_S, TrainerLease
from .liveness import EXIT_FAULTED, EXIT_STALLED, LivenessConfig, ProcessLiveness, activity_liveness, liveness_file_from_env
from .ranks import RankFailed, Ranks, launched_by_torchrun

log = logging.getLogger("ratchet_trainer.worker")

SHARED_QUEUE = "ratchet-trainer"
# Beside the TS workers' 9464-9467 (src/workers/telemetry.ts).
DEFAULT_METRICS_PORT = 9468
# Fault injection for the recovery tests: after each micro-batch of step
# RATCHET_TRAINER_FAULT_STEP (any step if unset), touch RATCHET_TRAINER_FAULT_MARKER
# and sleep RATCHET_TRAINER_FAULT_SLEEP_S seconds: a slow micro-batch, during which
# the step thread reports nothing (only the liveness thread heartbeats).
FAULT_SLEEP_ENV = "RATCHET_TRAINER_FAULT_SLEEP_S"
FAULT_STEP_ENV = "RATCHET_TRAINER_FAULT_STEP"
FAULT_MARKER_ENV = "RATCHET_TRAINER_FAULT_MARKER"
# With RATCHET_TRAINER_FAULT_ONCE=1 the sleep happens only while the marker does not exist yet: a
# restarted trainer (same environment, under a process manager) runs the step normally.
FAULT_ONCE_ENV = "RATCHET_TRAINER_FAULT_ONCE"
# Self-fencing on a stalled activity (liveness.py EXIT_STALLED) or a process fault (EXIT_FAULTED): on unless set to 0.
FENCE_ENV = "RATCHET_TRAINER_FENCE"
# Fault injection for the process-fault tests: trainer.step of RATCHET_TRAINER_FAULT_STEP (any step if unset)
# raises RuntimeError(<this text>) after its first micro-batch, as torch does for a CUDA or NCCL error; with
# RATCHET_TRAINER_FAULT_ONCE=1 only while RATCHET_TRAINER_FAULT_MARKER does not exist (then it is written).
FAULT_RAISE_ENV = "RATCHET_TRAINER_FAULT_RAISE"
# How long a fenced worker waits for Temporal to take the failure it reports before it exits anyway.
FENCE_REPORT_S = 10.0

# The activities that touch the model run in a thread and opt out of the SDK's
# thread-injected cancel exception (see the heartbeat in step).
# Input errors: retrying the same payload cannot succeed, so fail the activity at once.
_NON_RETRYABLE = (ConfigError, BatchError, CheckpointError, StepOrderError, StepConflictError, ArtifactError, StoreConfigError, StoreUnavailable, DiskFull,
                  TrainerNotLoaded, RankFailed)
# Deterministic for one step: the same batch fails the same way on any trainer. The
# workflow records the step with the error and goes on (docs/contracts.md).
_STEP_FAULTS = {NonFiniteGradientError: "NonFiniteGradient", StepOutOfMemoryError: "StepOutOfMemory",
                StepPartitionError: "StepPartition"}
# Every other error is a process fault (issue 39): a CUDA or NCCL runtime error, an out-of-memory at load, a
# bug. CUDA errors are sticky and a failed collective leaves the group unusable, so the process cannot be
# trusted with the next call: it reports the fault as TrainerFault (the error's class and this worker named in
# the details) and fences itself; the workflow retries on its replacement, and only a batch that fails with the
# same error class on two different trainer processes is a poison batch (src/workflows/trainerSession.ts).
PROCESS_FAULT = "TrainerFault"


def error_class(e: BaseException) -> str:
    """The error's class as the workflow compares it: builtins bare (RuntimeError), others with their module."""
    t = type(e)
    return t.__qualname__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__qualname__}"


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once (find_library runs a subprocess); None elsewhere."""
    libc_name = ctypes.util.find_library("c")
    if not libc_name:
        return None
    try:
        return ctypes.CDLL(libc_name).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to trim
        return None


def release_freed_memory() -> None:
    """Hand memory freed by a step back to the OS (glibc keeps it otherwise).

    On the CPU a step's activations reach gigabytes; without this the idle
    trainer holds its peak while vLLM and the sandboxes share the machine.
    """
    trim = _malloc_trim()
    if trim is not None:
        t0 = time.monotonic()
        trim(0)
        took = time.monotonic() - t0
        # While glibc trims, any thread that calls malloc waits for the arena, and a Python thread does
        # that holding the GIL: the whole process, its liveness thread included, stands still meanwhile
        # (measured: the liveness thread's gap equals the trim's duration). Say so when it is long enough
        # to matter next to the liveness file's staleness limit (issue 25, hole 10).
        if took > 5:
            log.warning("malloc_trim froze this process (every thread, the liveness file's too)",
                        extra={"seconds": round(took, 1)})


def _default_artifacts() -> Path:
    if os.environ.get("RATCHET_ARTIFACTS"):
        return Path(os.environ["RATCHET_ARTIFACTS"])
    home = os.environ.get("RATCHET_HOME") or str(Path(__file__).resolve().parents[2] / ".ratchet")
    return Path(home) / "artifacts"


def activity_cancelled(step: int) -> Exception:
    from temporalio.exceptions import CancelledError

    return CancelledError(f"trainer.step {step} cancelled between micro-batches; no update was applied")


class TrainerActivities:
    """Holds at most one run's trainer; activities on it are serialised by a lock. Under torchrun this
    is rank 0, and its model calls (commands.py) run on every rank."""

    def __init__(self, artifacts_root: Path, worker_id: str | None = None, shared_queue: str = SHARED_QUEUE,
                 liveness: ProcessLiveness | None = None, lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
                 ranks: Ranks | None = None, holder_running: Callable[[str], Awaitable[bool]] | None = None):
        self.artifacts_root = artifacts_root
        # Whether a run's workflow still runs (workflow_running); None: a holder is never taken from before its TTL.
        self.holder_running = holder_running
        self.liveness = liveness
        self.worker_id = worker_id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.task_queue = f"{shared_queue}-{self.worker_id}"
        self.ranks = ranks
        self.commands = TrainerCommands(artifacts_root, self.worker_id, ranks)
        self._lock = threading.Lock()
        # Held for microseconds only (announce runs on the event loop, the rest in threads).
        self._lease_lock = threading.Lock()
        # Runs whose trainer_config came from a newer build (version skew, docs/upgrades.md): handed back, and
        # their announces refused, so that they go to a newer trainer on the shared queue.
        self.newer_runs: dict[str, str] = {}
        self.lease = TrainerLease(ttl_s=lease_ttl_s)
        # Set by the first process fault: this process takes no more work and exits (run_worker's on_fault).
        self.faulted: str | None = None
        self.on_fault: Callable[[], None] | None = None

    def _busy(self, run_id: str, retryable: bool) -> ApplicationError:
        return ApplicationError(
            f"trainer {self.worker_id} is leased to run {self.lease.holder_now()!r}, not {run_id!r}. "
            "The run waits for a free trainer (status waiting-for-trainer); start another trainer worker "
            "(python -m ratchet_trainer.worker, with its own --metrics-port) or stop the other run",
            type="TrainerBusy", non_retryable=not retryable,
        )

    def _outdated(self, run_id: str, retryable: bool) -> ApplicationError:
        log.warning("a newer build wrote this run's trainer_config: handing the run to a newer trainer",
                    extra={"run_id": run_id, "worker_id": self.worker_id, "why": self.newer_runs[run_id]})
        return ApplicationError(
            f"trainer {self.worker_id} is older than run {run_id!r}'s trainer_config ({self.newer_runs[run_id]}); "
            "the run goes to a newer trainer on the shared queue and waits for one (waiting-for-trainer). "
            "Fix: start this release's trainer worker, then stop this one",
            type="TrainerBusy", non_retryable=not retryable,
        )

    @contextmanager
    def _leased(self, run_id: str, on_busy: str) -> Iterator[None]:
        """One call of run_id: claims or renews the lease, which cannot expire while the call runs."""
        if not isinstance(run_id, str) or not run_id:
            yield  # no run: the activity itself names the missing field
            return
        with self._lease_lock:
            if not self.lease.claim(run_id):
                if on_busy == "busy":
                    raise self._busy(run_id, retryable=False)
                raise ApplicationError(
                    f"worker {self.worker_id} no longer holds run {run_id!r}: its lease expired and run "
                    f"{self.lease.holder_now()!r} took the trainer. Fix: none needed, the run re-announces and reloads its checkpoint",
                    type="TrainerNotLoaded", non_retryable=True,
                )
            self.lease.begin(run_id)
        try:
            yield
        finally:
            with self._lease_lock:
                self.lease.end(run_id)

    @contextmanager
    def _trainer_lock(self, live) -> Iterator[None]:
        """The trainer's lock for one activity; the wait for it is not a stall of that activity (liveness.Watchdog.waiting)."""
        with live.waiting({"phase": "waiting for the trainer (another call holds it)"}):
            self._lock.acquire()
        try:
            if self.faulted is not None:
                raise self._fenced()
            yield
        finally:
            self._lock.release()

    @property
    def trainer(self) -> Trainer | None:
        return self.commands.trainer

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        self.commands.trainer = trainer

    def _fenced(self) -> ApplicationError:
        """A call that reaches a process fenced by a process fault: the run re-announces (like a lost lease)."""
        return ApplicationError(
            f"trainer {self.worker_id} fenced itself after a process fault ({self.faulted}) and is exiting. "
            "Fix: none needed, the run re-announces and its replacement loads the last checkpoint",
            type="TrainerNotLoaded", non_retryable=True)

    def _process_fault(self, name: str, e: BaseException, req: dict[str, Any]) -> ApplicationError:
        """An error with no type of ours: report it with its class, then fence this process (exit EXIT_FAULTED)."""
        cls = error_class(e)
        self.faulted = f"{name}: {cls}: {str(e)[:200]}"
        log.critical("process fault: the trainer reports it and fences itself (exits) so its process manager replaces it",
                     exc_info=e, extra={"activity": name, "run_id": req.get("run_id"), "step": req.get("step"),
                                        "error_class": cls, "exit_code": EXIT_FAULTED, "worker_id": self.worker_id})
        if self.on_fault is not None:
            self.on_fault()
        return ApplicationError(
            f"trainer {self.worker_id} failed {name} with {cls}: {str(e)[:1000]}. A process fault: this trainer process "
            f"fences itself (exit {EXIT_FAULTED}) and the run retries on its replacement, which loads the last checkpoint. "
            "Fix: none if it passes there; a batch that fails with the same error class on two trainer processes is "
            "recorded as PoisonBatch and skipped",
            {"error_class": cls, "worker_id": self.worker_id, "activity": name},
            type=PROCESS_FAULT, non_retryable=True)

    def _fail(self, e: Exception) -> ApplicationError:
        # StoreUnavailable keeps its type: the workflow waits for the store (waiting-for-store) and calls again.
        # A full disk, however it surfaced, is DiskFull: the workflow waits for space (waiting-for-disk).
        # Failed on another rank only: the type of that rank's error, the message names every rank's.
        if isinstance(e, RankFailed):
            return ApplicationError(str(e), type=e.error_type, non_retryable=True)
        e = disk_full(e) or e
        return ApplicationError(str(e), type=type(e).__name__, non_retryable=True)

    def _disk_full_or_raise(self, e: OSError) -> ApplicationError:
        """An OSError that is a full disk becomes a DiskFull failure; any other one propagates as before."""
        if disk_full(e) is None:
            raise e
        log.warning("disk full: the run waits for space", extra={"error": str(disk_full(e))})
        return self._fail(e)

    def _live(self, name: str, req: dict[str, Any]):
        """Timer heartbeats + the stall watchdog for one activity; the window comes with the request."""
        try:
            cfg = LivenessConfig.parse(req.get("liveness"), f"{name} liveness")
        except ConfigError as e:
            raise self._fail(e) from e
        return activity_liveness(name, cfg, self.liveness)

    async def _take_from_ended(self, holder: str, run_id: str) -> bool:
        """run_id takes the trainer from `holder` if holder's workflow no longer runs (terminated, or ended
        without releasing): without this, the next run waited out the lease's TTL (issue 42)."""
        if self.holder_running is None or await self.holder_running(holder):
            return False
        with self._lease_lock:
            taken = self.lease.take_from_ended(holder, run_id)
        if taken:
            log.warning("the run holding this trainer no longer runs: its lease goes to the run that asks",
                        extra={"ended_run_id": holder, "run_id": run_id, "worker_id": self.worker_id})
        return taken

    @activity.defn(name="trainer.announce")
    async def announce(self, req: dict[str, Any] | None = None) -> dict[str, str]:
        run_id = (req or {}).get("run_id")
        if self.faulted is not None:  # exiting: the retry goes back to the shared queue, to another trainer
            raise ApplicationError(f"trainer {self.worker_id} fenced itself after a process fault and is exiting",
                                   type="TrainerBusy", non_retryable=False)
        out = {"task_queue": self.task_queue, "worker_id": self.worker_id}
        if isinstance(run_id, str) and run_id:
            if run_id in self.newer_runs:
                # Retryable: the retry goes back to the shared queue, where a newer trainer takes it.
                raise self._outdated(run_id, retryable=True)
            with self._lease_lock:
                claimed = self.lease.claim(run_id)
                holder = self.lease.holder_now()
            if not claimed:
                if holder is None or not await self._take_from_ended(holder, run_id):
                    # Retryable: the retry goes back to the shared queue, where a free trainer may take it.
                    raise self._busy(run_id, retryable=True)
                # The workflow unloads that run's adapters from inference (TrainerSession.ensure).
                out["freed_run_id"] = holder
            log.info("trainer leased", extra={"run_id": run_id, "worker_id": self.worker_id})
        return out

    @activity.defn(name="trainer.release", no_thread_cancel_exception=True)
    def release(self, req: dict[str, Any]) -> dict[str, Any]:
        """The run ended: give the trainer back and free its model's memory (on every rank). Idempotent."""
        run_id = req.get("run_id")
        with self._lock, self._lease_lock:
            released = self.lease.release(run_id)
            if released:
                self.commands.release(req)
        if released:
            release_freed_memory()
            log.info("trainer released", extra={"run_id": run_id, "worker_id": self.worker_id})
        return {"released": released, "worker_id": self.worker_id}

    @activity.defn(name="trainer.load", no_thread_cancel_exception=True)
    def load(self, req: dict[str, Any]) -> dict[str, Any]:
        run_id = req.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ApplicationError("trainer.load needs run_id (a non-empty string)", type="ConfigError", non_retryable=True)
        newer = newer_than_this_code(req.get("trainer_config") or {})
        if newer is not None:
            self.newer_runs[run_id] = newer
            with self._lock, self._lease_lock:
                if self.lease.release(run_id):
                    self.commands.release({"run_id": run_id})
            # TrainerBusy: the workflow re-announces (trainerSession.ts), and announce refuses this run here.
            raise self._outdated(run_id, retryable=False)
        with self._live("trainer.load", req) as live, self._trainer_lock(live), self._leased(run_id, on_busy="busy"):
            live.progress({"phase": "loading", "run_id": run_id})
            held = self.trainer.run_id if self.trainer is not None else None
            if held is not None and held != run_id:
                # Another run's model, left by a run that lost the lease (ended): free it before building this one.
                self.commands.release({"run_id": held})
                release_freed_memory()
            try:
                with io_progress(live.progress, "loading"):
                    return self.commands.load(req, progress=live.progress)
            except _NON_RETRYABLE as e:
                raise self._fail(e) from e
            except FailureError:
                raise
            except OSError as e:  # the S3 download cache filling its disk
                if disk_full(e) is None:
                    raise self._process_fault("trainer.load", e, req) from e
                raise self._disk_full_or_raise(e) from e
            except Exception as e:  # noqa: BLE001 - a process fault (a CUDA out-of-memory at load, a bug)
                raise self._process_fault("trainer.load", e, req) from e

    @activity.defn(name="trainer.step", no_thread_cancel_exception=True)
    def step(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._live("trainer.step", req) as live, self._trainer_lock(live), self._leased(req.get("run_id"), on_busy="gone"):
            step = req.get("step")
            live.progress({"phase": "lock acquired", "step": step})
            fault_sleep = float(os.environ.get(FAULT_SLEEP_ENV, "0") or 0)
            fault_step = os.environ.get(FAULT_STEP_ENV)
            if fault_step not in (None, "") and fault_step != str(step):
                fault_sleep = 0.0
            fault_raise = os.environ.get(FAULT_RAISE_ENV) if fault_step in (None, "") or fault_step == str(step) else None
            if os.environ.get(FAULT_ONCE_ENV) == "1" and os.environ.get(FAULT_MARKER_ENV) and Path(os.environ[FAULT_MARKER_ENV]).exists():
                fault_sleep, fault_raise = 0.0, None

            def heartbeat(progress: dict[str, Any]) -> None:
                # Cancellation is checked here, between micro-batches, never injected into torch mid-kernel
                # (an exception raised inside autograd's checkpoint hooks corrupts its thread state).
                # The liveness thread's heartbeats bring the cancellation in. Under several ranks the
                # step runs to its end: the other ranks are already in the next micro-batch's collectives.
                if activity.is_cancelled() and self.ranks is None:
                    raise activity_cancelled(step)
                live.progress(progress)
                if fault_raise and progress["micro_batch"] > 0:
                    if os.environ.get(FAULT_MARKER_ENV):
                        Path(os.environ[FAULT_MARKER_ENV]).write_text(json.dumps(progress))
                    raise RuntimeError(fault_raise)  # what torch raises for a CUDA or NCCL error
                if fault_sleep and progress["micro_batch"] > 0:
                    if os.environ.get(FAULT_MARKER_ENV):
                        Path(os.environ[FAULT_MARKER_ENV]).write_text(json.dumps(progress))
                    time.sleep(fault_sleep)  # a slow micro-batch: no progress, no heartbeat from this thread

            try:
                metrics, trainer = self.commands.step(req, heartbeat=heartbeat)
            except _NON_RETRYABLE as e:
                raise self._fail(e) from e
            except tuple(_STEP_FAULTS) as e:
                log.warning("step fault: nothing applied, the run skips this step", extra={"run_id": req.get("run_id"), "step": step, "error": str(e)})
                raise ApplicationError(str(e), type=_STEP_FAULTS[type(e)], non_retryable=True) from e
            except FailureError:  # cancelled between micro-batches, or already typed
                raise
            except OSError as e:  # the S3 download cache filling its disk while fetching the batch
                if disk_full(e) is None:
                    raise self._process_fault("trainer.step", e, req) from e
                raise self._disk_full_or_raise(e) from e
            except Exception as e:  # noqa: BLE001 - a process fault (a CUDA or NCCL runtime error, a bug)
                raise self._process_fault("trainer.step", e, req) from e
            finally:
                release_freed_memory()
            if metrics.get("applied"):
                record_step_metrics(metrics)
            return metrics

    @activity.defn(name="trainer.save", no_thread_cancel_exception=True)
    def save(self, req: dict[str, Any]) -> dict[str, Any]:
        with self._live("trainer.save", req) as live, self._trainer_lock(live), self._leased(req.get("run_id"), on_busy="gone"):
            live.progress({"phase": "saving", "step": req.get("step")})
            try:
                with io_progress(live.progress, "saving", step=req.get("step")):
                    return self.commands.save(req)
            except _NON_RETRYABLE as e:
                raise self._fail(e) from e
            except FailureError:
                raise
            except OSError as e:
                if disk_full(e) is None:
                    raise self._process_fault("trainer.save", e, req) from e
                raise self._disk_full_or_raise(e) from e
            except Exception as e:  # noqa: BLE001 - a process fault
                raise self._process_fault("trainer.save", e, req) from e


def record_step_metrics(metrics: dict[str, Any]) -> None:
    """Ratchet's trainer counters, through the SDK's own metric meter: they are served on the
    same Prometheus endpoint as the Temporal runtime metrics, with no extra dependency."""
    meter = activity.metric_meter()
    meter.create_counter("ratchet_trainer_steps_total", "Optimizer steps applied by this trainer").add(1)
    meter.create_counter("ratchet_trainer_tokens_total", "Trainable tokens in the steps applied").add(int(metrics.get("tokens", 0)))
    meter.create_histogram_float("ratchet_trainer_step_seconds", "Trainer step wall time", "s").record(float(metrics.get("duration_s", 0.0)))


def telemetry_runtime(metrics_port: str) -> Runtime | None:
    """A runtime that serves Prometheus metrics on 127.0.0.1:<port>, or None for "off"."""
    if metrics_port in ("off", "0", ""):
        return None
    if not metrics_port.isdigit() or not 0 < int(metrics_port) < 65536:
        raise SystemExit(f"--metrics-port / RATCHET_METRICS_PORT={metrics_port!r} is not a port. Fix: a number 1-65535, or off")
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", int(metrics_port)))
        except OSError:
            raise SystemExit(f"metrics port 127.0.0.1:{metrics_port} is taken (another trainer on this host?). "
                             "Fix: --metrics-port <free port> (or RATCHET_METRICS_PORT), or off") from None
    return Runtime(telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=f"127.0.0.1:{metrics_port}")))


class JsonFormatter(logging.Formatter):
    _skip = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        out = {"time": self.formatTime(record), "level": record.levelname, "logger": record.name, "msg": record.getMessage()}
        out.update({k: v for k, v in vars(record).items() if k not in self._skip})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


async def workflow_running(client: Client, workflow_id: str) -> bool:
    """Whether the run's workflow (its newest execution) still runs. A workflow Temporal does not know
    has ended long ago; when Temporal cannot answer, the holder keeps the trainer (the TTL still applies)."""
    try:
        desc = await client.get_workflow_handle(workflow_id).describe(rpc_timeout=timedelta(seconds=10))
    except RPCError as e:
        if e.status == RPCStatusCode.NOT_FOUND:
            return False
        log.warning("could not ask Temporal whether the lease holder still runs; it keeps the trainer",
                    extra={"run_id": workflow_id, "error": str(e)})
        return True
    return desc.status == WorkflowExecutionStatus.RUNNING


async def run_worker(address: str | None, namespace: str | None, artifacts_root: Path, ready_file: Path | None = None,
                     shared_queue: str = SHARED_QUEUE, runtime: Runtime | None = None, profile: str | None = None,
                     liveness_file: Path | None = None, lease_ttl_s: float = DEFAULT_LEASE_TTL_S,
                     ranks: Ranks | None = None, rank_pids: list[int] | None = None, fence: bool = True) -> None:
    # address/namespace/profile: flags over TEMPORAL_* over temporal.toml (ratchet_trainer/connection.py).
    conn = connection.resolve(address, namespace, profile)
    client = await connection.connect_client(conn, **({"runtime": runtime} if runtime else {}))
    address = conn.address
    # Touched every few seconds while the process runs and no activity is stalled; the stack's supervisor
    # kill -9s and restarts a trainer whose file goes stale (frozen, wedged): it cannot do that itself.
    # A stalled activity in a process that still runs fences it: it exits with EXIT_STALLED (liveness.py).
    liveness = ProcessLiveness(liveness_file, fence=fence).start()
    acts = TrainerActivities(artifacts_root, shared_queue=shared_queue, liveness=liveness, lease_ttl_s=lease_ttl_s, ranks=ranks,
                             holder_running=functools.partial(workflow_running, client))
    # One thread runs the model; a second lets announce/heartbeats proceed meanwhile.
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=2)
    shared = Worker(client, task_queue=shared_queue, activities=[acts.announce])
    own = Worker(client, task_queue=acts.task_queue, activities=[acts.announce, acts.load, acts.step, acts.save, acts.release],
                 activity_executor=pool, max_concurrent_activities=2)
    world_size = ranks.size if ranks else 1
    log.info("trainer worker started", extra={"address": address, "worker_id": acts.worker_id, "world_size": world_size,
                                              "task_queue": acts.task_queue, "artifacts": str(artifacts_root)})
    if ready_file is not None:
        ready_file.write_text(json.dumps({"task_queue": acts.task_queue, "worker_id": acts.worker_id,
                                          "world_size": world_size, "rank_pids": rank_pids or [os.getpid()]}))
    loop = asyncio.get_running_loop()
    faulted = asyncio.Event()
    if fence:
        acts.on_fault = lambda: loop.call_soon_threadsafe(faulted.set)
    running = asyncio.ensure_future(asyncio.gather(shared.run(), own.run()))
    fault_seen = asyncio.ensure_future(faulted.wait())
    try:
        await asyncio.wait({running, fault_seen}, return_when=asyncio.FIRST_COMPLETED)
        if faulted.is_set():
            # Let the SDK hand the failure (its type and error class) to Temporal, then exit: the process
            # manager starts a clean trainer. Past FENCE_REPORT_S the workflow sees a timeout instead.
            try:
                await asyncio.wait_for(asyncio.gather(shared.shutdown(), own.shutdown()), FENCE_REPORT_S)
            except Exception as e:  # noqa: BLE001 - exiting either way
                log.warning("worker shutdown after a process fault did not finish; exiting anyway", extra={"error": repr(e)})
            acts.commands.stop_followers()
            liveness.fence_now(EXIT_FAULTED, f"process fault: {acts.faulted}")
        await running
    finally:
        fault_seen.cancel()
        acts.commands.stop_followers()


def main() -> None:
    ap = argparse.ArgumentParser(description="Ratchet trainer: Temporal activity worker")
    ap.add_argument("--address", default=None, help="default: TEMPORAL_ADDRESS, the temporal.toml profile, or 127.0.0.1:7233")
    ap.add_argument("--namespace", default=None, help="default: TEMPORAL_NAMESPACE, the profile, or default")
    ap.add_argument("--profile", default=None, help="temporal.toml profile (default: TEMPORAL_PROFILE, or default)")
    ap.add_argument("--artifacts", type=Path, default=_default_artifacts(), help="artifact store root (local)")
    ap.add_argument("--ready-file", type=Path, default=None, help="write {task_queue, worker_id} here once polling")
    ap.add_argument("--shared-queue", default=SHARED_QUEUE, help="queue polled for trainer.announce (tests isolate with their own)")
    ap.add_argument("--liveness-file", type=Path, default=liveness_file_from_env(),
                    help="touched every 5 s while this trainer is live (default $RATCHET_LIVENESS_FILE; none if unset)")
    ap.add_argument("--fence", action=argparse.BooleanOptionalAction,
                    default=os.environ.get(FENCE_ENV, "1").lower() not in ("0", "false", "no", "off"),
                    help=f"exit with status {EXIT_STALLED} when an activity stalls, so the process manager restarts "
                         f"the trainer (default on; ${FENCE_ENV}=0 or --no-fence keeps the hung process)")
    ap.add_argument("--log-level", default="INFO")
    ap.add_argument("--lease-minutes", type=float, default=float(os.environ.get("RATCHET_TRAINER_LEASE_MINUTES", DEFAULT_LEASE_TTL_S / 60)),
                    help="a run that has not called this trainer for this long loses it to another run (default 30)")
    ap.add_argument("--metrics-port", default=os.environ.get("RATCHET_METRICS_PORT", str(DEFAULT_METRICS_PORT)),
                    help=f"Prometheus endpoint on 127.0.0.1 (SDK runtime + ratchet_trainer_*), default {DEFAULT_METRICS_PORT}; off disables")
    args = ap.parse_args()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter())
    logging.basicConfig(level=args.log_level, handlers=[handler])
    try:  # bad connection settings or codec key: fail before anything starts
        connection.resolve(args.address, args.namespace, args.profile)
    except connection.ConnectionConfigError as e:
        raise SystemExit(f"error: {e}") from None
    if args.lease_minutes <= 0:
        raise SystemExit(f"--lease-minutes / RATCHET_TRAINER_LEASE_MINUTES={args.lease_minutes} must be > 0. Fix: e.g. 30")
    try:  # the S3 download cache's bound: a bad value fails here, not mid-run at the first download
        cache_limit_bytes()
    except StoreConfigError as e:
        raise SystemExit(f"error: {e}") from None
    # Under torchrun (WORLD_SIZE > 1) rank 0 is this worker and every other rank follows it (ranks.py).
    ranks = Ranks() if launched_by_torchrun() else None
    rank_pids = ranks.pids() if ranks else None
    if ranks is not None and not ranks.leader:
        follow(ranks, TrainerCommands(args.artifacts, f"rank {ranks.rank}", ranks))
        return
    runtime = telemetry_runtime(args.metrics_port)
    log.info("Prometheus metrics", extra={"url": f"http://127.0.0.1:{args.metrics_port}/metrics" if runtime else "off"})
    try:
        asyncio.run(run_worker(args.address, args.namespace, args.artifacts, args.ready_file, args.shared_queue, runtime, args.profile,
                               args.liveness_file, lease_ttl_s=args.lease_minutes * 60, ranks=ranks, rank_pids=rank_pids,
                               fence=args.fence))
    except ConnectionError as e:
        connection.exit_on_connect_error(e)


if __name__ == "__main__":
    main()
