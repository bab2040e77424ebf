"""Step replay (docs/operations.md#step-replay): re-run one recorded trainer update and compare.

From the step's stored batch and the checkpoint the step started from (none for the run's first
trained step: the initial adapter, drawn from the trainer seed), a fresh Trainer applies the step
exactly as the worker did (Trainer.step: the step's randomness is seeded from (seed, step)), writes
the adapter with the worker's own checkpoint writer into a temporary directory, and compares its
sha256 (over its MANIFEST.sha256, as every directory artifact) with the one the run recorded.

On the CPU the hashes must match bit for bit. On a GPU kernels are not bitwise reproducible, so the
request may carry `tolerance`: the replay then passes when the adapter tensors differ from the
recorded ones by at most tolerance x the largest recorded magnitude (max |replayed - recorded| /
max |recorded|, over every tensor). The tensor comparison is reported either way when the recorded
adapter is readable.

The trainer config is the one the step's own checkpoint recorded (trainer_state.json): the config
the trainer held when it wrote that checkpoint. The learning rate in effect for the step (`lr`,
from the step's lineage) is set on the optimiser after the parent checkpoint is restored, as the
worker does for `ratchet set --lr`.

    python -m ratchet_trainer.replay --request req.json   # prints the result as JSON; exit 0 match, 1 mismatch, 2 bad input

Request: {run_id, step, batch, manifest, checkpoint (the step's recorded one), adapter (its recorded
adapter ref), parent_checkpoint (or null), lr?, store?, tolerance?, device?, threads?}, or a list of
them: each replayed in turn in this one process (torch loads once, ~10 s a replay saved on a CPU),
one JSON line each as it finishes; the first bad request ends the list (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from .core.artifacts import ArtifactError, check_ref, dir_ref
from .core.batch import BatchError, load_batch
from .core.checkpoint import _SET_KEYS, _write, read_checkpoint_state, restore_checkpoint
from .core.config import ConfigError, parse_trainer_config
from .core.errors import CheckpointError
from .core.store import StoreConfigError, local_dir_ref, store_for
from .core.trainer import Trainer

log = logging.getLogger("ratchet_trainer.replay")

ADAPTER_FILE = "adapter_model.safetensors"


class ReplayInputError(ValueError):
    """The request cannot be replayed as given (a missing field, a step that trained no adapter)."""


def _cache_root(req: dict[str, Any]) -> Path:
    return Path(req.get("cache_dir") or Path(tempfile.gettempdir()) / "ratchet-replay-cache")


def _config_of(req: dict[str, Any], store) -> Any:
    """The trainer config the step's own checkpoint recorded, with the request's device and lr."""
    ckpt = check_ref(req.get("checkpoint"), "checkpoint")
    root = local_dir_ref(ckpt, "checkpoint", store)
    state = json.loads((root / "trainer_state.json").read_text())
    if state.get("run_id") != req["run_id"]:
        raise ReplayInputError(f"checkpoint {ckpt['uri']} belongs to run {state.get('run_id')!r}, not {req['run_id']!r}")
    if state.get("step") != req["step"]:
        raise ReplayInputError(f"checkpoint {ckpt['uri']} is of step {state.get('step')}, not {req['step']}")
    raw = state["trainer_config"]
    if "shared_prefix" not in raw:  # recorded before the shared-prefix layout existed: the step trained padded
        raw = {**raw, "shared_prefix": False}
    if req.get("device"):
        raw = {**raw, "device": req["device"]}
    return parse_trainer_config(raw)


def compare_adapters(replayed: Path, recorded: Path) -> dict[str, float]:
    """max |replayed - recorded| over every adapter tensor, and that divided by max |recorded|."""
    from safetensors.torch import load_file

    a, b = load_file(str(replayed / ADAPTER_FILE)), load_file(str(recorded / ADAPTER_FILE))
    if sorted(a) != sorted(b):
        raise ReplayInputError(f"the replayed adapter has tensors {sorted(set(a) ^ set(b))[:3]} the recorded one lacks (or the reverse)")
    diff = max((float((a[k].double() - b[k].double()).abs().max()) for k in a), default=0.0)
    scale = max((float(b[k].double().abs().max()) for k in b), default=0.0)
    same_tensors = all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)
    return {"max_abs_diff": diff, "max_rel_diff": diff / scale if scale > 0 else diff,
            "same_tensors": same_tensors, "same_config": _config(replayed) == _config(recorded)}


def _config(adapter_dir: Path) -> Any:
    """adapter_config.json with peft's set-valued lists sorted, as checkpoint.canonical_adapter_config writes it."""
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    return {k: sorted(v) if k in _SET_KEYS and isinstance(v, list) and all(isinstance(x, str) for x in v) else v
            for k, v in cfg.items()}


def replay_step(req: dict[str, Any]) -> dict[str, Any]:
    """Replays req's step; returns {step, recorded_adapter_sha256, adapter_sha256, match, passed, ...}."""
    for key in ("run_id", "step", "batch", "manifest", "checkpoint", "adapter"):
        if req.get(key) is None:
            raise ReplayInputError(f"replay request: `{key}` is missing. Fix: the step's record names it "
                                   "(a step that trained nothing has no adapter to reproduce)")
    step = req["step"]
    if not isinstance(step, int) or step < 0:
        raise ReplayInputError(f"replay request: step must be an integer >= 0, got {step!r}")
    tolerance = req.get("tolerance")
    if tolerance is not None and (isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or tolerance < 0):
        raise ReplayInputError(f"replay request: tolerance must be a number >= 0, got {tolerance!r}")
    if req.get("threads"):
        torch.set_num_threads(int(req["threads"]))
    store = store_for(req.get("store"), _cache_root(req))
    recorded = check_ref(req["adapter"], "adapter")
    cfg = _config_of(req, store)
    if cfg.adapter is None:
        raise ReplayInputError(f"run {req['run_id']} trains the full model (mode = \"full\"): replay compares LoRA adapters only")
    parent = req.get("parent_checkpoint")
    if parent is not None:
        # Verified (manifest and every file) and checked against the run and model before anything is built.
        read_checkpoint_state(check_ref(parent, "parent checkpoint"), req["run_id"], cfg.model_fingerprint(), store)
    batch = load_batch(check_ref(req["batch"], "batch"), check_ref(req["manifest"], "batch manifest"), store)

    trainer = Trainer(req["run_id"], cfg)
    if parent is not None:
        restore_checkpoint(trainer, parent, store)
        if step in trainer.ledger or step < trainer.last_step:
            raise ReplayInputError(f"parent checkpoint {parent['uri']} already holds step {trainer.last_step} >= {step}: "
                                   "it is not the checkpoint this step started from")
    # The rate in effect for the step (the lineage's, after any `ratchet set --lr`), whatever the parent's optimiser held.
    lr = req.get("lr") if req.get("lr") is not None else cfg.optim.lr
    trainer.cfg = dataclasses.replace(trainer.cfg, optim=dataclasses.replace(trainer.cfg.optim, lr=float(lr)))
    for group in trainer.optimizer.param_groups:
        group["lr"] = float(lr)
    metrics = trainer.step(step, batch, batch_sha256=req["batch"]["sha256"])

    out_dir = Path(tempfile.mkdtemp(prefix="ratchet-replay-"))
    try:
        _write(trainer, out_dir, step)  # the worker's writer: the same files, so the same manifest
        replayed = dir_ref(out_dir / "adapter")
        result: dict[str, Any] = {
            "run_id": req["run_id"], "step": step,
            "recorded_adapter_sha256": recorded["sha256"], "adapter_sha256": replayed["sha256"],
            "match": replayed["sha256"] == recorded["sha256"],
            "parent_checkpoint": parent["uri"] if parent else None,
            "device": str(trainer.device), "threads": torch.get_num_threads(),
            "loss": metrics.get("loss"), "grad_norm": metrics.get("grad_norm"),
        }
        try:
            result.update(compare_adapters(out_dir / "adapter", local_dir_ref(recorded, "recorded adapter", store)))
        except (ArtifactError, OSError) as e:  # the hash still answers; the tensors cannot be compared
            result["compare_error"] = str(e)
        if tolerance is not None:
            result["tolerance"] = float(tolerance)
        # Adapters written before adapter_config.json was canonical (0.7) list peft's sets in the writing
        # process's hash order: their sha256 cannot be reproduced, their contents can (reported as such).
        result["same_contents"] = bool(result.get("same_tensors") and result.get("same_config"))
        result["passed"] = result["match"] or result["same_contents"] or (
            tolerance is not None and "max_rel_diff" in result and result["max_rel_diff"] <= float(tolerance))
        return result
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ratchet_trainer.replay", description=__doc__.split("\n\n")[0])
    p.add_argument("--request", required=True, help="the replay request as a JSON file ('-': stdin)")
    p.add_argument("--log-level", default="WARNING")
    args = p.parse_args(argv)
    logging.basicConfig(level=args.log_level, stream=sys.stderr)
    failed = False
    try:
        text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text()
        parsed = json.loads(text)
        for req in parsed if isinstance(parsed, list) else [parsed]:
            result = replay_step(req)
            print(json.dumps(result), flush=True)
            if not result["passed"]:
                failed = True
                print(f"replay: step {result['step']} MISMATCH: recorded adapter sha256 {result['recorded_adapter_sha256']}, "
                      f"replayed {result['adapter_sha256']}"
                      + (f" (max abs diff {result['max_abs_diff']:.3e}, relative {result['max_rel_diff']:.3e})" if "max_abs_diff" in result else ""),
                      file=sys.stderr)
    except (ReplayInputError, ArtifactError, BatchError, CheckpointError, ConfigError, StoreConfigError,
            json.JSONDecodeError, OSError) as e:
        print(json.dumps({"error": type(e).__name__, "message": str(e)}))
        print(f"replay: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
