"""A warm start: a new run's first adapter is another run's (`[model] init_from`, docs/training.md).

The workflow resolved and verified the origin (src/records/initFrom.ts) and sends it with
trainer.load when the run has no checkpoint of its own. Here it is verified again (its bytes,
on this host) and checked against this trainer's base model and LoRA shape, then its weights
become the new run's adapter. Only the weights travel: the optimiser, the RNG and the ledger
are the new run's own (step 0, policy version 0), so the origin's steps never count as this
run's.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from .artifacts import ArtifactError, check_ref
from .config import ConfigError, TrainerConfig, parse_trainer_config
from .errors import CheckpointError
from .sharded import distribute_like
from .store import S3Store, local_dir_ref
from .trainer import Trainer

log = logging.getLogger(__name__)

STATE_FORMAT = "ratchet.trainer_state/v1"


def adapter_identity(cfg: TrainerConfig) -> dict[str, Any]:
    """What the adapter's tensors must agree on: the base model and the LoRA shape (dropout may differ:
    it is not in the weights). src/records/initFrom.ts compares the same keys."""
    lora = cfg.adapter
    return {
        "model.path": cfg.model.path,
        "model.config": dict(cfg.model.config) if cfg.model.config is not None else None,
        "mode": cfg.mode,
        "lora.rank": lora.rank if lora else None,
        "lora.alpha": float(lora.alpha) if lora else None,
        "lora.target_modules": sorted(lora.target_modules) if lora else None,
        # A model built from a config (tests, benchmarks) has random base weights drawn from the seed.
        "seed": cfg.seed if cfg.model.path is None else None,
    }


def prepare_init(init: Any, cfg: TrainerConfig, store: S3Store | None) -> dict[str, Any]:
    """Verifies the origin's checkpoint and adapter and checks they fit `cfg`; touches no trainer.
    Returns {"adapter_dir": Path, "from": ..., "run_id": ..., "step": ...}."""
    if not isinstance(init, dict):
        raise CheckpointError(f"model.init_from: trainer.load's init must be an object, got {init!r}")
    ckpt = check_ref(init.get("checkpoint"), "model.init_from checkpoint")
    adapter = check_ref(init.get("adapter"), "model.init_from adapter")
    origin = f"{init.get('run_id')}@{init.get('step')}"
    try:
        root = local_dir_ref(ckpt, "model.init_from checkpoint", store)
        adapter_dir = local_dir_ref(adapter, "model.init_from adapter", store)
    except ArtifactError as e:
        raise ArtifactError(f"model.init_from {origin}: {e}. Fix: name a step of that run whose checkpoint verifies") from e
    state = json.loads((root / "trainer_state.json").read_text())
    if state.get("format") != STATE_FORMAT:
        raise CheckpointError(f"model.init_from {origin}: checkpoint {ckpt['uri']} has trainer_state format {state.get('format')!r}, "
                              f"expected {STATE_FORMAT!r}")
    try:
        saved = parse_trainer_config(state.get("trainer_config") or {})
    except ConfigError as e:
        raise CheckpointError(f"model.init_from {origin}: its checkpoint's trainer_config does not parse: {e}") from e
    have, want = adapter_identity(saved), adapter_identity(cfg)
    diffs = [f"{k} {have[k]!r} vs this run's {want[k]!r}" for k in want if have[k] != want[k]]
    if diffs:
        raise CheckpointError(f"model.init_from {origin}: the adapter was trained for another model or LoRA shape: {'; '.join(diffs)}. "
                              "Fix: use that run's [model] path and [trainer.lora] rank, alpha and target_modules")
    if not (adapter_dir / "adapter_model.safetensors").is_file():
        raise CheckpointError(f"model.init_from {origin}: {adapter['uri']} has no adapter_model.safetensors")
    return {"adapter_dir": adapter_dir, "from": init.get("from"), "run_id": init.get("run_id"), "step": init.get("step"),
            "adapter_sha256": adapter["sha256"]}


def load_init_adapter(trainer: Trainer, prepared: dict[str, Any]) -> None:
    """The origin's adapter weights into `trainer` (fp32 masters where it has them); its optimiser and
    ledger stay fresh. Every trainable tensor must be in the file with this model's shape."""
    if trainer.ledger:
        raise CheckpointError(f"run {trainer.run_id}: model.init_from loads only into a fresh trainer (it has applied steps)")
    path: Path = prepared["adapter_dir"] / "adapter_model.safetensors"
    weights = load_file(str(path))
    current = trainer.trainable_state()
    missing = sorted(set(current) - set(weights))
    extra = sorted(set(weights) - set(current))
    if missing or extra:
        raise CheckpointError(f"model.init_from {prepared['run_id']}@{prepared['step']}: the adapter's tensors do not match this model's "
                              f"(missing {missing[:3]}, unknown {extra[:3]}). Fix: the same [trainer.lora] target_modules as that run")
    for k, v in weights.items():
        if tuple(current[k].shape) != tuple(v.shape):
            raise CheckpointError(f"model.init_from: tensor {k} has shape {list(v.shape)}, this model's has {list(current[k].shape)}")
    with torch.no_grad():
        if trainer.sharded:
            from peft import get_peft_model_state_dict

            targets = get_peft_model_state_dict(trainer.model, state_dict=trainer.model.state_dict(keep_vars=True))
            for k, p in targets.items():
                p.copy_(distribute_like(weights[k], p))
        else:
            from peft import set_peft_model_state_dict

            with trainer.master_weights():  # into the fp32 masters; bf16 copies re-rounded on exit
                set_peft_model_state_dict(trainer.model, weights)
    trainer.init_from = {k: prepared[k] for k in ("from", "run_id", "step", "adapter_sha256")}
    if trainer.cfg.loss.kl_coef > 0:  # the KL term pulls towards the warm start, not the base model
        trainer.set_kl_reference(weights)
    log.info("run starts from another run's adapter", extra={"run_id": trainer.run_id, "init_from": prepared["from"],
                                                             "origin_step": prepared["step"], "path": str(path)})
