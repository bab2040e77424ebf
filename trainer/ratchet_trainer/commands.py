"""The trainer activities' model calls, the same on every rank of a job (ranks.py).

The Temporal side (leases, liveness, error types: worker.py) runs on rank 0 only; what
touches the model is here, so rank 0 and its followers run the very same code on the same
request. Each call is split into `prepare` (reads and checks, no collective) and `run`
(the collective work), which ranks.in_lockstep agrees on across ranks.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from .code_version import code_version
from .core.artifacts import check_ref
from .core.batch import BatchError, load_batch
from .core.checkpoint import read_checkpoint_state, restore_checkpoint, save_checkpoint
from .core.config import parse_trainer_config
from .core.init_adapter import load_init_adapter, prepare_init
from .core.store import StoreConfigError, store_for
from .core.trainer import Heartbeat, Trainer
from .ranks import Ranks, in_lockstep

log = logging.getLogger("ratchet_trainer.commands")


class TrainerNotLoaded(Exception):
    """The call names a run this process holds no trainer for."""


class TrainerCommands:
    """This rank's trainer (at most one run's) and the calls on it."""

    def __init__(self, artifacts_root: Path, owner: str, ranks: Ranks | None = None):
        self.artifacts_root = artifacts_root
        self.owner = owner  # named in errors: the worker id
        self.ranks = ranks
        self.trainer: Trainer | None = None

    def store(self, req: dict[str, Any]):
        """The run's S3 store from the request's `store` settings; None for file:// runs."""
        try:
            return store_for(req.get("store"), self.artifacts_root / ".cache" / "s3")
        except StoreConfigError:
            raise
        except Exception as e:  # noqa: BLE001 - a bad setting is the caller's to fix
            raise StoreConfigError(f"store settings {req.get('store')!r}: {e}") from e

    def trainer_for(self, run_id: Any) -> Trainer:
        if self.trainer is None or self.trainer.run_id != run_id:
            held = self.trainer.run_id if self.trainer else None
            raise TrainerNotLoaded(
                f"worker {self.owner} holds no trainer for run {run_id!r} (holds {held!r}). "
                "Fix: call trainer.load on this queue first (after a worker restart, load the last checkpoint)")
        return self.trainer

    def _lead(self, op: str, req: dict[str, Any]) -> None:
        """On rank 0 of several: send the call to every other rank before running it here."""
        if self.ranks is not None and self.ranks.leader:
            self.ranks.send(op, req)

    def stop_followers(self) -> None:
        if self.ranks is not None and self.ranks.leader:
            self.ranks.send("exit", {})

    # -- the calls ---------------------------------------------------------------

    def load(self, req: dict[str, Any], progress: Heartbeat | None = None) -> dict[str, Any]:
        run_id = req["run_id"]
        self._lead("load", req)

        def prepare():
            store = self.store(req)
            cfg = parse_trainer_config(req.get("trainer_config") or {})
            ckpt = req.get("checkpoint")
            init = None
            if ckpt is None and req.get("init") is not None:
                # A warm start without a checkpoint of its own yet: verified before building, like a checkpoint.
                init = prepare_init(req["init"], cfg, store)
                if progress:
                    progress({"phase": "init_from verified", "run_id": run_id})
            if ckpt is not None:
                check_ref(ckpt, "checkpoint")
                # Verified before building: a bad checkpoint leaves the current trainer as it is.
                read_checkpoint_state(ckpt, run_id, cfg.model_fingerprint(), store)
                if progress:
                    progress({"phase": "checkpoint verified", "run_id": run_id})
            return store, cfg, ckpt, init

        def run(prepared):
            store, cfg, ckpt, init = prepared
            current = self.trainer
            if current is not None and current.run_id == run_id and current.cfg == cfg and ckpt is not None:
                restore_checkpoint(current, ckpt, store)
                return current
            new = Trainer(run_id, cfg)
            if progress:
                progress({"phase": "model built", "run_id": run_id})
            if ckpt is not None:
                restore_checkpoint(new, ckpt, store)
            elif init is not None:
                load_init_adapter(new, init)
            return new

        new = in_lockstep(self.ranks, prepare, run, "trainer.load")
        self.trainer = new
        log.info("trainer loaded", extra={"run_id": run_id, "step": new.last_step, "policy_version": new.policy_version,
                                          "from_checkpoint": req.get("checkpoint") is not None,
                                          "init_from": new.init_from and new.init_from.get("from"),
                                          "world_size": self.ranks.size if self.ranks else 1})
        return {"step": new.last_step, "policy_version": new.policy_version, "ledger": sorted(new.ledger)}

    def step(self, req: dict[str, Any], heartbeat: Heartbeat | None = None) -> tuple[dict[str, Any], Trainer]:
        """(metrics, trainer); metrics["applied"] is False for a step already in the ledger."""
        step = req.get("step")
        self._lead("step", req)

        def prepare():
            trainer = self.trainer_for(req.get("run_id"))
            if not isinstance(step, int) or step < 0:
                raise BatchError(f"trainer.step needs step (an integer >= 0), got {step!r}")
            batch_sha256 = (req.get("batch") or {}).get("sha256")
            done = trainer.applied(step, batch_sha256)
            if done is not None:
                return trainer, done, None, batch_sha256
            batch = load_batch(check_ref(req.get("batch"), "batch"), check_ref(req.get("manifest"), "batch manifest"), self.store(req))
            return trainer, None, batch, batch_sha256

        def run(prepared):
            trainer, done, batch, batch_sha256 = prepared
            if done is not None:
                return done, trainer
            if req.get("lr") is not None:  # `ratchet set --lr`: from this step on (every rank gets the same req)
                trainer.set_lr(req["lr"])
            return trainer.step(step, batch, heartbeat=heartbeat, batch_sha256=batch_sha256), trainer

        return in_lockstep(self.ranks, prepare, run, f"trainer.step {step}")

    def save(self, req: dict[str, Any]) -> dict[str, Any]:
        self._lead("save", req)

        def prepare():
            return self.trainer_for(req.get("run_id")), int(req.get("step", -2)), self.store(req)

        def run(prepared):
            trainer, step, store = prepared
            # The trainer code that produced it, for the step's lineage (code_version.py).
            return {**save_checkpoint(trainer, self.artifacts_root, step, store), "code": code_version()}

        return in_lockstep(self.ranks, prepare, run, "trainer.save")

    def release(self, req: dict[str, Any]) -> None:
        """Drops the run's trainer (rank 0 decided, through its lease, that the run let it go)."""
        self._lead("release", req)
        if self.trainer is not None and self.trainer.run_id == req.get("run_id"):
            self.trainer = None


def follow(ranks: Ranks, commands: TrainerCommands) -> None:
    """A follower rank's life: run each command rank 0 sends, until it sends `exit`. Errors were
    already agreed on (rank 0 reports them to the workflow); a follower only logs them."""
    log.info("rank following rank 0", extra={"rank": ranks.rank, "world_size": ranks.size})
    while True:
        op, req = ranks.receive()
        if op == "exit":
            log.info("rank 0 stopped; exiting", extra={"rank": ranks.rank})
            return
        try:
            if op == "load":
                commands.load(req)
            elif op == "step":
                commands.step(req)
            elif op == "save":
                commands.save(req)
            elif op == "release":
                commands.release(req)
            else:  # the ranks run different code: nothing they do together can be trusted
                log.error("unknown command from rank 0; exiting (do all ranks run the same ratchet_trainer?)",
                          extra={"rank": ranks.rank, "command": op})
                logging.shutdown()
                os._exit(70)
        except Exception as e:  # noqa: BLE001 - agreed with rank 0, which fails the activity
            log.warning("command failed on this rank", extra={"rank": ranks.rank, "command": op, "error": str(e)[:500]})
