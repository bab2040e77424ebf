"""One trainer across the ranks of a torchrun job: rank 0 is the Temporal worker, the others mirror it.

    torchrun --nproc-per-node 8 -m ratchet_trainer.worker --address ...      (one host)
    torchrun --nnodes 2 --node-rank <n> --rdzv-endpoint <host:port> ...       (several hosts)

Only rank 0 polls Temporal; the activity worker's model calls (load, step, save, release) are
commands: rank 0 broadcasts each one on a gloo control group before running it, every other rank
runs the same call, and the ranks step in lockstep through the model's own collectives (FSDP2).

Each command runs in two phases, each ended by an agreement (every rank's error, or none):
`prepare` reads and checks inputs (the batch, the checkpoint) without any collective, so a rank
that cannot read its input fails the command on every rank before any of them enters a collective;
`run` is the collective work. A rank that fails inside `run` may leave the others inside a
collective: then the group cannot be trusted, so every rank exits and torchrun tears the job down.
The same happens when a rank dies (torchrun's agent stops the rest). Either way the activity fails
as a whole on the dead worker, and the workflow's retry announces again and reloads the last
checkpoint on every rank of the next job (torchrun --max-restarts, or the supervisor's restart).
Nothing is half-applied: a step is in the ledger of every rank, or of none that survives.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

log = logging.getLogger("ratchet_trainer.ranks")

# Followers wait on the control group between activities, for as long as the run is idle; a dead
# rank 0 does not leave them waiting, torchrun stops them.
CONTROL_TIMEOUT = timedelta(days=365)
# The model's collectives: a rank stuck past this (its peer failed mid-collective) errors out and exits.
COLLECTIVE_TIMEOUT_ENV = "RATCHET_DIST_TIMEOUT_S"
DEFAULT_COLLECTIVE_TIMEOUT_S = 600


class RankFailed(Exception):
    """A command failed on some rank; the message names each rank and its error."""

    def __init__(self, message: str, failed: list[tuple[int, "Outcome"]]):
        super().__init__(message)
        self.failed = failed

    @property
    def error_type(self) -> str:
        """The first failed rank's error type: what the workflow acts on (StoreUnavailable: it waits)."""
        return self.failed[0][1].error_type or "RankFailed"


@dataclass
class Outcome:
    """One rank's end of a phase: None, or the error's type and message."""

    error_type: str | None = None
    message: str | None = None


def launched_by_torchrun() -> bool:
    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def collective_timeout() -> timedelta:
    raw = os.environ.get(COLLECTIVE_TIMEOUT_ENV, str(DEFAULT_COLLECTIVE_TIMEOUT_S))
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1
    if seconds <= 0:
        raise SystemExit(f"{COLLECTIVE_TIMEOUT_ENV}={raw!r} is not a number of seconds > 0. Fix: e.g. {DEFAULT_COLLECTIVE_TIMEOUT_S}")
    return timedelta(seconds=seconds)


class Ranks:
    """The job's process groups: the default one (NCCL on GPUs, gloo on CPUs) for the model, a gloo
    one for commands."""

    def __init__(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            backend = "cuda:nccl,cpu:gloo"
        else:
            backend = "gloo"
        if not dist.is_initialized():
            dist.init_process_group(backend, timeout=collective_timeout())
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.control = dist.new_group(backend="gloo", timeout=CONTROL_TIMEOUT)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def pids(self) -> list[int]:
        """Every rank's process id, rank order (a collective: called once at start on every rank)."""
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, os.getpid(), group=self.control)
        return out

    def send(self, op: str, req: dict[str, Any]) -> None:
        """Rank 0: the next command for every other rank."""
        dist.broadcast_object_list([(op, req)], src=0, group=self.control)

    def receive(self) -> tuple[str, dict[str, Any]]:
        box: list[Any] = [None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def agree(self, phase: str, mine: Outcome) -> None:
        """Every rank's outcome of `phase`; raises RankFailed on every rank if any failed."""
        out: list[Any] = [None] * self.size
        dist.all_gather_object(out, mine, group=self.control)
        failed = [(r, o) for r, o in enumerate(out) if o.error_type]
        if failed:
            detail = "; ".join(f"rank {r}: {o.error_type}: {o.message}" for r, o in failed)
            raise RankFailed(f"{phase} failed on {len(failed)} of {self.size} ranks ({detail})", failed)


def outcome_of(fn: Callable[[], Any]) -> tuple[Any, Outcome, BaseException | None]:
    try:
        return fn(), Outcome(), None
    except Exception as e:  # noqa: BLE001 - every rank hears of it, then the caller re-raises
        return None, Outcome(type(e).__name__, str(e)[:2000]), e


def in_lockstep(ranks: Ranks | None, prepare: Callable[[], Any], run: Callable[[Any], Any], what: str) -> Any:
    """prepare() then run(prepared) on this rank, agreeing with every other rank after each phase.
    A failure in prepare fails the command everywhere, with this rank's own error where it has one.
    A failure in run leaves the group unusable: this process exits (torchrun stops the others)."""
    if ranks is None:
        return run(prepare())
    prepared, outcome, error = outcome_of(prepare)
    _agree_or_raise(ranks, f"{what} (prepare)", outcome, error)
    result, outcome, error = outcome_of(lambda: run(prepared))
    if error is not None and not _same_everywhere(error):
        log.error("command failed inside its collective work; the group cannot go on, exiting",
                  extra={"rank": ranks.rank, "command": what, "error": str(error)[:500]})
        logging.shutdown()
        os._exit(70)
    _agree_or_raise(ranks, f"{what} (run)", outcome, error)
    return result


def _agree_or_raise(ranks: Ranks, phase: str, outcome: Outcome, error: BaseException | None) -> None:
    """This rank's own error where it has one (its type is what the workflow acts on), else RankFailed."""
    try:
        ranks.agree(phase, outcome)
    except RankFailed:
        if error is not None:
            raise error from None
        raise


def _same_everywhere(error: BaseException) -> bool:
    """Errors raised from what every rank shares (the request, the batch, the checkpoint's files, the
    all-reduced loss and gradient norm) before or between collectives: every rank raises them at the
    same point, so the group is still in step and the command can fail as an ordinary error."""
    from .core.artifacts import ArtifactError
    from .core.batch import BatchError
    from .core.config import ConfigError
    from .core.errors import CheckpointError
    from .core.trainer import NonFiniteGradientError, StepConflictError, StepOrderError, StepPartitionError

    return isinstance(error, (ArtifactError, BatchError, CheckpointError, ConfigError, NonFiniteGradientError,
                              StepConflictError, StepOrderError, StepPartitionError))
