"""Checkpoint I/O, laid out as docs/contracts.md says.

runs/<run_id>/checkpoints/step-<n>-<batch sha256, first 16 hex>/
  adapter/            LoRA: peft adapter_model.safetensors + adapter_config.json (+ MANIFEST.sha256)
  model/              full fine-tuning: model.safetensors + config.json (+ MANIFEST.sha256)
  optimizer.pt  rng.pt  ledger.json  trainer_state.json  MANIFEST.sha256

The directory is written under a temporary name and renamed, so a reader sees a
whole checkpoint or none. The name carries the batch the step trained on: a
step redone after a crash (the run resumed before recording it, re-sampled, and
trained another batch) gets its own directory, never the earlier attempt's. A
save of a (step, batch) already on disk returns the existing refs: the same
name always means the same state. Ledgers written before batches were recorded
(no batch_sha256) keep the old `step-<n>` name.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from .artifacts import MANIFEST, ArtifactRef, commit_dir, dir_ref, tmp_sibling, write_manifest
from .store import S3Store, local_dir_ref
from .trainer import Trainer

log = logging.getLogger(__name__)

STATE_FORMAT = "ratchet.trainer_state/v1"


class CheckpointError(ValueError):
    """A checkpoint that does not belong to this run or model; nothing was changed."""


def checkpoint_dir(artifacts_root: Path, run_id: str, step: int, batch_sha256: str | None = None) -> Path:
    name = f"step-{step}" if not batch_sha256 else f"step-{step}-{batch_sha256[:16]}"
    return artifacts_root / "runs" / run_id / "checkpoints" / name


def _rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def checkpoint_key(run_id: str, step: int, batch_sha256: str | None = None) -> str:
    """The store key of a checkpoint: the same content-keyed name as checkpoint_dir (step + batch), so a
    redone step's upload never meets the earlier attempt's objects."""
    return f"runs/{run_id}/checkpoints/{checkpoint_dir(Path(), run_id, step, batch_sha256).name}"


def save_checkpoint(trainer: Trainer, artifacts_root: Path, step: int, store: S3Store | None = None) -> dict[str, Any]:
    """Writes the checkpoint under artifacts_root; with an S3 store, that is local staging and the
    refs returned are the uploaded copy's (the workflow and every other host read those)."""
    if step != trainer.last_step:
        raise CheckpointError(
            f"run {trainer.run_id}: asked to save step {step} but the newest applied step is {trainer.last_step}. "
            "Fix: save right after trainer.step for that step"
        )
    weights = "adapter" if trainer.cfg.model.lora is not None else "model"
    if store is not None:
        key = checkpoint_key(trainer.run_id, step, trainer.ledger[step].get("batch_sha256"))
        existing = store.dir_ref(key)
        if existing is None:
            final = _write_local(trainer, artifacts_root, step)
            _upload(store, key, final, weights)
            existing = store.dir_ref(key)
            log.info("checkpoint uploaded", extra={"run_id": trainer.run_id, "step": step, "uri": existing and existing["uri"]})
        else:
            log.info("checkpoint already in the store; returning it", extra={"run_id": trainer.run_id, "step": step})
        weights_ref = store.dir_ref(f"{key}/{weights}")
        assert existing is not None and weights_ref is not None
        return {"checkpoint": existing, "adapter": weights_ref if weights == "adapter" else None, "weights": weights_ref,
                "policy_version": trainer.policy_version}
    final = _write_local(trainer, artifacts_root, step)
    out: dict[str, Any] = {"checkpoint": dir_ref(final), "adapter": None, "weights": dir_ref(final / weights),
                           "policy_version": trainer.policy_version}
    if weights == "adapter":
        out["adapter"] = out["weights"]
    return out


def _upload(store: S3Store, key: str, final: Path, weights: str) -> None:
    """Every file the checkpoint's manifest lists, then the weights' own manifest, then the checkpoint's
    manifest: the last write is the commit point, so a reader never trusts a half-uploaded checkpoint."""
    for line in (final / MANIFEST).read_text().splitlines():
        _, rel = line.split("  ", 1)
        store.put_bytes(f"{key}/{rel}", (final / rel).read_bytes())
    store.put_bytes(f"{key}/{weights}/{MANIFEST}", (final / weights / MANIFEST).read_bytes())
    store.put_bytes(f"{key}/{MANIFEST}", (final / MANIFEST).read_bytes())


def _write_local(trainer: Trainer, artifacts_root: Path, step: int) -> Path:
    final = checkpoint_dir(artifacts_root, trainer.run_id, step, trainer.ledger[step].get("batch_sha256"))
    if not (final / "MANIFEST.sha256").is_file():
        tmp = tmp_sibling(final)
        tmp.mkdir(parents=True)
        try:
            _write(trainer, tmp, step)
            commit_dir(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        log.info("checkpoint written", extra={"run_id": trainer.run_id, "step": step, "path": str(final)})
    else:
        log.info("checkpoint already on disk; returning it", extra={"run_id": trainer.run_id, "step": step})
    return final


def _write(trainer: Trainer, d: Path, step: int) -> None:
    model = trainer.model
    if trainer.cfg.model.lora is not None:
        # peft's own writer: the layout vLLM's /v1/load_lora_adapter reads; fp32 masters, not bf16 copies.
        with trainer.master_weights():
            model.save_pretrained(str(d / "adapter"), safe_serialization=True)
        write_manifest(d / "adapter")
    else:
        (d / "model").mkdir()
        state = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        # Tied embeddings share storage; safetensors stores each tensor once.
        seen: dict[int, str] = {}
        for k in list(state):
            ptr = state[k].data_ptr()
            if ptr in seen:
                state[k] = state[k].clone()
            seen[ptr] = k
        save_file(state, str(d / "model" / "model.safetensors"))
        model.config.save_pretrained(str(d / "model"))
        write_manifest(d / "model")
    torch.save(trainer.optimizer.state_dict(), d / "optimizer.pt")
    torch.save(_rng_state(), d / "rng.pt")
    (d / "ledger.json").write_text(json.dumps({str(k): v for k, v in sorted(trainer.ledger.items())}, indent=1))
    (d / "trainer_state.json").write_text(json.dumps({
        "format": STATE_FORMAT,
        "run_id": trainer.run_id,
        "step": step,
        "policy_version": trainer.policy_version,
        "optimizer_steps": trainer.optimizer_steps,
        "model_fingerprint": trainer.cfg.model_fingerprint(),
        "trainer_config": trainer.cfg.to_dict(),
        "torch": torch.__version__,
    }, indent=1))
    write_manifest(d)


def read_checkpoint_state(ref: ArtifactRef, run_id: str, fingerprint: str, store: S3Store | None = None) -> tuple[Path, dict[str, Any]]:
    """Verify a checkpoint (an s3:// one is fetched into the local cache first) and check it fits
    this run and model, touching no trainer."""
    root = local_dir_ref(ref, "checkpoint", store)
    state = json.loads((root / "trainer_state.json").read_text())
    if state.get("format") != STATE_FORMAT:
        raise CheckpointError(f"checkpoint {ref['uri']}: trainer_state.json format {state.get('format')!r}, expected {STATE_FORMAT!r}")
    if state["run_id"] != run_id:
        raise CheckpointError(f"checkpoint {ref['uri']} belongs to run {state['run_id']!r}, not {run_id!r}: its step ledger "
                              "would be wrong for this run. Fix: load a checkpoint of this run, or start from scratch")
    if state["model_fingerprint"] != fingerprint:
        saved = state.get("trainer_config", {}).get("model", {})
        raise CheckpointError(
            f"checkpoint {ref['uri']} was written for another model or adapter layout "
            f"(fingerprint {state['model_fingerprint']} vs {fingerprint}; saved model.path={saved.get('path')!r}, "
            f"model.lora={saved.get('lora')!r}). Fix: use the trainer_config the checkpoint was made with"
        )
    return root, state


def restore_checkpoint(trainer: Trainer, ref: ArtifactRef, store: S3Store | None = None) -> dict[str, Any]:
    """Load weights, optimiser, RNG and ledger into `trainer`; all reads and checks happen first."""
    root, state = read_checkpoint_state(ref, trainer.run_id, trainer.cfg.model_fingerprint(), store)
    if trainer.cfg.model.lora is not None:
        weights = load_file(str(root / "adapter" / "adapter_model.safetensors"))
    else:
        weights = load_file(str(root / "model" / "model.safetensors"))
    optim = torch.load(root / "optimizer.pt", map_location="cpu", weights_only=True)
    rng = torch.load(root / "rng.pt", map_location="cpu", weights_only=False)
    ledger = {int(k): v for k, v in json.loads((root / "ledger.json").read_text()).items()}
    current = trainer.trainable_state()
    for k, v in weights.items():
        if k not in current:
            raise CheckpointError(f"checkpoint {ref['uri']}: tensor {k} is not in this model")
        if tuple(current[k].shape) != tuple(v.shape):
            raise CheckpointError(f"checkpoint {ref['uri']}: tensor {k} has shape {list(v.shape)}, the model has {list(current[k].shape)}")

    with torch.no_grad():
        if trainer.cfg.model.lora is not None:
            from peft import set_peft_model_state_dict

            with trainer.master_weights():  # into the fp32 masters; bf16 copies re-rounded on exit
                set_peft_model_state_dict(trainer.model, weights)
        else:
            trainer.model.load_state_dict(weights, strict=True)
    trainer.optimizer.load_state_dict(optim)
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    trainer.ledger = ledger
    log.info("checkpoint restored", extra={"run_id": trainer.run_id, "step": state["step"], "path": str(root)})
    return state
