"""Checkpoint I/O, laid out as docs/contracts.md says.

runs/<run_id>/checkpoints/step-<n>-<batch sha256, first 16 hex>/
  adapter/            LoRA: peft adapter_model.safetensors + adapter_config.json (+ MANIFEST.sha256)
  model/              full fine-tuning: model.safetensors + config.json (+ MANIFEST.sha256)
  kl_reference/       a warm-started run with kl_coef > 0: the adapter the KL term pulls towards
                      (adapter_model.safetensors, peft keys); absent: the reference is the base model
  optimizer.pt  rng.pt  ledger.json  trainer_state.json  MANIFEST.sha256

Saved by replicated ranks (parallelism.py), rank 0 writes what one process writes. Saved by
FSDP2 ranks, the trainable and optimiser state are sharded instead of optimizer.pt: every rank writes its shards into `sharded/`
(torch.distributed.checkpoint, see sharded.py), while rank 0 alone writes the whole
adapter/model (gathered: vLLM and single-process readers need it), rng, ledger and
trainer_state.json (with "sharded": true and the world size), then the manifest. A sharded
checkpoint loads at any world size, one process included; a single-process one loads
under several ranks (every rank reads the whole files and keeps its shards).

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
import re
import shutil
import uuid
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from .artifacts import MANIFEST, ArtifactError, ArtifactRef, commit_dir, dir_ref, tmp_sibling, verify_dir, write_manifest
from .distributed import local_tensor, world
from .errors import CheckpointError
from .io_progress import io_bytes
from .sharded import check_sharded_fits, distribute_like, load_sharded, save_sharded, trainable_params
from .store import ObjectExists, S3Store, local_dir_ref
from .trainer import Trainer

log = logging.getLogger(__name__)

STATE_FORMAT = "ratchet.trainer_state/v1"
KL_REFERENCE = Path("kl_reference") / "adapter_model.safetensors"


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
    redone step's upload never meets the earlier attempt's objects. The TypeScript side builds the same key
    (runKeys.checkpoint in src/artifacts/keys.ts); tests/test_artifact_keys.py holds the two together."""
    return f"runs/{run_id}/checkpoints/{checkpoint_dir(Path(), run_id, step, batch_sha256).name}"


def save_checkpoint(trainer: Trainer, artifacts_root: Path, step: int, store: S3Store | None = None) -> dict[str, Any]:
    """Writes the checkpoint under artifacts_root; with an S3 store, that is local staging and the
    refs returned are the uploaded copy's (the workflow and every other host read those)."""
    if step != trainer.last_step:
        raise CheckpointError(
            f"run {trainer.run_id}: asked to save step {step} but the newest applied step is {trainer.last_step}. "
            "Fix: save right after trainer.step for that step"
        )
    weights = "adapter" if trainer.cfg.adapter is not None else "model"
    if store is not None:
        key = checkpoint_key(trainer.run_id, step, trainer.ledger[step].get("batch_sha256"))
        existing = _agreed(lambda: store.dir_ref(key))
        if existing is not None and not _agreed(lambda: _sound_remote(store, existing)):
            # This (step, batch) was saved before and no longer verifies: the checkpoint a fallback left
            # behind (seeded rollouts redo the same batch). Saved beside it under an attempt key, never over it.
            key = checkpoint_attempt_key(trainer.run_id, step, trainer.ledger[step].get("batch_sha256"),
                                         _agreed(lambda: uuid.uuid4().hex[:8]))
            log.warning("the checkpoint of this step and batch in the store does not verify; saving under an attempt key",
                        extra={"run_id": trainer.run_id, "step": step, "bad": existing["uri"], "attempt_key": key})
            existing = None
        if existing is None:
            final = _write_local(trainer, artifacts_root, step)
            key = _agreed(lambda: _upload_no_clobber(store, key, final, weights))
            existing = _agreed(lambda: store.dir_ref(key))
            log.info("checkpoint uploaded", extra={"run_id": trainer.run_id, "step": step, "uri": existing and existing["uri"]})
            if world()[0] == 0:
                _drop_staging(final, step)
        else:
            log.info("checkpoint already in the store; returning it", extra={"run_id": trainer.run_id, "step": step})
        weights_ref = _agreed(lambda: store.dir_ref(f"{key}/{weights}"))
        assert existing is not None and weights_ref is not None
        return {"checkpoint": existing, "adapter": weights_ref if weights == "adapter" else None, "weights": weights_ref,
                "policy_version": trainer.policy_version}
    final = _write_local(trainer, artifacts_root, step)
    out: dict[str, Any] = {"checkpoint": dir_ref(final), "adapter": None, "weights": dir_ref(final / weights),
                           "policy_version": trainer.policy_version}
    if weights == "adapter":
        out["adapter"] = out["weights"]
    return out


def _drop_staging(final: Path, step: int) -> None:
    """With an S3 store the local checkpoint is staging only: once uploaded, nothing reads it (every reader
    follows the s3:// ref). Goes with it: staging of this run's earlier steps whose upload failed and was never
    retried (the run moved on). A failed upload keeps its staging for the retry; a write in progress (a dot
    name) is never touched."""
    for d in final.parent.iterdir() if final.parent.is_dir() else ():
        m = re.match(r"step-(\d+)", d.name)
        if d == final or (m and int(m.group(1)) < step):
            shutil.rmtree(d, ignore_errors=True)
    log.info("checkpoint staging dropped", extra={"path": str(final), "step": step})


def _sound(root: Path) -> bool:
    """Every file of the checkpoint directory matches its manifest."""
    try:
        verify_dir(dir_ref(root), "checkpoint")
        return True
    except (ArtifactError, OSError):
        return False


def _sound_remote(store: S3Store, ref: dict[str, Any]) -> bool:
    """The stored checkpoint downloads and every file matches its manifest (fetch_dir verifies)."""
    try:
        store.fetch_dir(ref, "checkpoint")
        return True
    except (ArtifactError, OSError):
        return False


def _agreed(fn: Callable[[], Any]) -> Any:
    """fn() on rank 0, the same answer on every rank (a collective under several ranks): the ranks
    must agree whether to write, or some would wait in a collective the others never enter."""
    rank, world_size = world()
    if world_size == 1:
        return fn()
    box = [fn() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def checkpoint_attempt_key(run_id: str, step: int, batch_sha256: str | None, attempt: str) -> str:
    """Where a save that lost a race for checkpoint_key writes instead: `<checkpoint key>.attempt-<id>`
    (runKeys.checkpointAttempt in src/artifacts/keys.ts). Its ref is what the save returns and the
    workflow records; readers follow that ref."""
    return f"{checkpoint_key(run_id, step, batch_sha256)}.attempt-{attempt}"


def _upload_no_clobber(store: S3Store, key: str, final: Path, weights: str) -> str:
    """Uploads the checkpoint with conditional puts, so no save of the same step (a partitioned trainer's
    stale save and its replacement's) ever replaces an object the other wrote. Returns the key it is
    committed under: `key` when this save wrote it, or found the same bytes or another save's committed
    checkpoint there; else (another save's different bytes half-way there) a fresh attempt key."""
    try:
        _upload(store, key, final, weights)
        return key
    except ObjectExists as e:
        if store.dir_ref(key) is not None:
            log.info("another save of this step committed first; returning its checkpoint", extra={"key": key, "conflict": e.uri})
            return key
        run_id, name = key.split("/")[1], key.rsplit("/", 1)[1]
        m = re.fullmatch(r"step-(\d+)(?:-([0-9a-f]+))?", name)
        assert m, key
        alt = checkpoint_attempt_key(run_id, int(m.group(1)), m.group(2), uuid.uuid4().hex[:8])
        log.warning("another save of this step is writing the checkpoint key; saving under an attempt key",
                    extra={"key": key, "conflict": e.uri, "attempt_key": alt})
        _upload(store, alt, final, weights)
        return alt


def _upload(store: S3Store, key: str, final: Path, weights: str) -> None:
    """Every file the checkpoint's manifest lists, then the weights' own manifest, then the checkpoint's
    manifest: the last write is the commit point, so a reader never trusts a half-uploaded checkpoint.
    Every put is conditional (If-None-Match: *): an object another save wrote is never replaced
    (ObjectExists when its bytes differ; the same bytes are this write, idempotent)."""
    for line in (final / MANIFEST).read_text().splitlines():
        _, rel = line.split("  ", 1)
        store.put_bytes(f"{key}/{rel}", (final / rel).read_bytes(), if_absent=True)
    store.put_bytes(f"{key}/{weights}/{MANIFEST}", (final / weights / MANIFEST).read_bytes(), if_absent=True)
    store.put_bytes(f"{key}/{MANIFEST}", (final / MANIFEST).read_bytes(), if_absent=True)


def _write_local(trainer: Trainer, artifacts_root: Path, step: int) -> Path:
    final = checkpoint_dir(artifacts_root, trainer.run_id, step, trainer.ledger[step].get("batch_sha256"))
    if _agreed(lambda: (final / "MANIFEST.sha256").is_file()):
        if _agreed(lambda: _sound(final)):
            log.info("checkpoint already on disk; returning it", extra={"run_id": trainer.run_id, "step": step})
            return final
        # Saved before and no longer verifies: the checkpoint a run fell back from, now retrained with the
        # same batch (seeded rollouts redo it). Written beside it, never over it: the record names the new one.
        bad = final
        # An earlier save of the retrained step already wrote beside it: that one (a retried save is idempotent).
        done = _agreed(lambda: next((str(p) for p in sorted(bad.parent.glob(f"{bad.name}.attempt-*"))
                                     if (p / MANIFEST).is_file() and _sound(p)), None))
        if done is not None:
            log.info("checkpoint already on disk beside a corrupt one; returning it", extra={"run_id": trainer.run_id, "step": step})
            return Path(done)
        final = final.with_name(f"{final.name}.attempt-{_agreed(lambda: uuid.uuid4().hex[:8])}")
        log.warning("the checkpoint of this step and batch on disk does not verify; writing beside it",
                    extra={"run_id": trainer.run_id, "step": step, "bad": str(bad), "path": str(final)})
    if trainer.sharded:
        _write_local_ranks(trainer, final, step)
    else:  # one process, or replicated ranks (each holds the same state): rank 0 writes it as one process does
        if world()[0] == 0:
            tmp = tmp_sibling(final)
            tmp.mkdir(parents=True)
            try:
                _write(trainer, tmp, step)
                commit_dir(tmp, final)
            finally:
                if tmp.exists():
                    shutil.rmtree(tmp, ignore_errors=True)
        if world()[1] > 1:
            dist.barrier()  # the checkpoint is committed before any rank returns its refs
    log.info("checkpoint written", extra={"run_id": trainer.run_id, "step": step, "path": str(final)})
    return final


def _write_local_ranks(trainer: Trainer, final: Path, step: int) -> None:
    """Every rank writes into one temporary directory (so its name is derived from the final one,
    the same on every rank; the artifacts root must be shared by the ranks), rank 0 commits it."""
    rank = world()[0]
    tmp = final.parent / f".{final.name}.tmp-ranks"
    if rank == 0:  # an earlier attempt that died half-way left its files here
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier()
    try:
        save_sharded(trainer, tmp)
        whole = _whole_weights(trainer)  # a collective: every rank gathers, rank 0 writes
        if rank == 0:
            _write(trainer, tmp, step, whole=whole)
        dist.barrier()  # every rank's shards are on disk before the manifest lists them
        if rank == 0:
            write_manifest(tmp)
            commit_dir(tmp, final)
    finally:
        if rank == 0 and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    dist.barrier()


def _whole_weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    """The trainable tensors gathered whole from the shards (model state-dict keys), in the same
    order on every rank."""
    if trainer.cfg.adapter is not None:
        return {k: local_tensor(p.detach()).cpu() for k, p in trainable_params(trainer.model).items()}
    return {k: local_tensor(v.detach()).cpu() for k, v in trainer.model.state_dict().items()}


# peft keeps these as sets and writes them in set order, which follows the process's string hash seed:
# the same adapter would get another adapter_config.json (so another sha256) in every process.
_SET_KEYS = ("target_modules", "exclude_modules", "modules_to_save")


def canonical_adapter_config(adapter_dir: Path) -> None:
    """Rewrites peft's adapter_config.json with its set-valued lists sorted (peft's own format otherwise:
    indent 2, sorted keys), so an adapter's sha256 depends on its contents alone (step replay compares it)."""
    f = adapter_dir / "adapter_config.json"
    cfg = json.loads(f.read_text())
    for k in _SET_KEYS:
        v = cfg.get(k)
        if isinstance(v, list) and all(isinstance(x, str) for x in v):
            cfg[k] = sorted(v)
    f.write_text(json.dumps(cfg, indent=2, sort_keys=True))


def _write(trainer: Trainer, d: Path, step: int, whole: dict[str, torch.Tensor] | None = None) -> None:
    """The checkpoint's files; `whole` (several ranks): the gathered trainable tensors, and the
    optimiser state is in sharded/ instead of optimizer.pt."""
    model = trainer.model
    if trainer.cfg.adapter is not None:
        # peft's own writer: the layout vLLM's /v1/load_lora_adapter reads; fp32 masters, not bf16 copies.
        with trainer.master_weights():
            model.save_pretrained(str(d / "adapter"), safe_serialization=True, state_dict=whole)
        canonical_adapter_config(d / "adapter")
        _wrote(d / "adapter" / "adapter_model.safetensors")
        write_manifest(d / "adapter")
    else:
        (d / "model").mkdir()
        state = whole if whole is not None else {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
        # Tied embeddings share storage; safetensors stores each tensor once.
        seen: dict[int, str] = {}
        for k in list(state):
            ptr = state[k].data_ptr()
            if ptr in seen:
                state[k] = state[k].clone()
            seen[ptr] = k
        save_file(state, str(d / "model" / "model.safetensors"))
        _wrote(d / "model" / "model.safetensors")
        model.config.save_pretrained(str(d / "model"))
        write_manifest(d / "model")
    if trainer.kl_reference is not None:  # the reference is the run's, not in its init: a resume gets no init
        (d / KL_REFERENCE).parent.mkdir()
        save_file({k: v.contiguous() for k, v in trainer.kl_reference.items()}, str(d / KL_REFERENCE))
    if whole is None:
        torch.save(trainer.optimizer.state_dict(), d / "optimizer.pt")
        _wrote(d / "optimizer.pt")
    torch.save(_rng_state(), d / "rng.pt")
    (d / "ledger.json").write_text(json.dumps({str(k): v for k, v in sorted(trainer.ledger.items())}, indent=1))
    sharded = {"sharded": True, "world_size": world()[1]} if whole is not None else {}
    (d / "trainer_state.json").write_text(json.dumps({
        "format": STATE_FORMAT,
        "run_id": trainer.run_id,
        "step": step,
        "policy_version": trainer.policy_version,
        "optimizer_steps": trainer.optimizer_steps,
        "model_fingerprint": trainer.cfg.model_fingerprint(),
        "trainer_config": trainer.cfg.to_dict(),
        "torch": torch.__version__,
        **sharded,
    }, indent=1))
    if whole is None:  # several ranks: rank 0 lists the files once every rank's shards are written
        write_manifest(d)


def _wrote(path: Path) -> None:
    """A whole file written or read in one call: its bytes count as checkpoint I/O progress (io_progress.py)."""
    io_bytes(path.stat().st_size if path.is_file() else 0)


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
        saved = state.get("trainer_config", {})
        model = saved.get("model", {})
        # Checkpoints written before the config matched the run config's [trainer] keep lora under model.
        lora = model["lora"] if "lora" in model else (saved.get("lora") if saved.get("mode", "lora") == "lora" else None)
        raise CheckpointError(
            f"checkpoint {ref['uri']} was written for another model or adapter layout "
            f"(fingerprint {state['model_fingerprint']} vs {fingerprint}; saved model.path={model.get('path')!r}, "
            f"lora={lora!r}). Fix: use the trainer_config the checkpoint was made with"
        )
    return root, state


def restore_checkpoint(trainer: Trainer, ref: ArtifactRef, store: S3Store | None = None) -> dict[str, Any]:
    """Load weights, optimiser, RNG and ledger into `trainer`; all reads and checks happen first.
    Any checkpoint loads at any world size: a sharded one through DCP (resharded on load), a
    single-process one read whole by every rank, which keeps its shards."""
    root, state = read_checkpoint_state(ref, trainer.run_id, trainer.cfg.model_fingerprint(), store)
    rng = torch.load(root / "rng.pt", map_location="cpu", weights_only=False)
    ledger = {int(k): v for k, v in json.loads((root / "ledger.json").read_text()).items()}
    reference = load_file(str(root / KL_REFERENCE)) if (root / KL_REFERENCE).is_file() else None
    if reference is not None and set(reference) != set(trainer.trainable_state()):
        raise CheckpointError(f"checkpoint {ref['uri']}: its KL reference's tensors are not this model's adapter's. "
                              "Fix: load it with the trainer_config it was written with")
    if state.get("sharded"):
        check_sharded_fits(trainer, root, ref["uri"])
        load_sharded(trainer, root)
    else:
        _load_whole(trainer, root, ref["uri"])
    torch.set_rng_state(rng["torch"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    trainer.ledger = ledger
    trainer.set_kl_reference(reference)
    log.info("checkpoint restored", extra={"run_id": trainer.run_id, "step": state["step"], "path": str(root),
                                           "sharded": bool(state.get("sharded")), "world_size": world()[1]})
    return state


def _load_whole(trainer: Trainer, root: Path, uri: str) -> None:
    """A single-process checkpoint: the whole adapter/model and optimizer.pt."""
    weights_file = root / "adapter" / "adapter_model.safetensors" if trainer.cfg.adapter is not None else root / "model" / "model.safetensors"
    weights = load_file(str(weights_file))
    _wrote(weights_file)
    optim = torch.load(root / "optimizer.pt", map_location="cpu", weights_only=True)
    _wrote(root / "optimizer.pt")
    current = trainer.trainable_state()
    for k, v in weights.items():
        if k not in current:
            raise CheckpointError(f"checkpoint {uri}: tensor {k} is not in this model")
        if tuple(current[k].shape) != tuple(v.shape):
            raise CheckpointError(f"checkpoint {uri}: tensor {k} has shape {list(v.shape)}, the model has {list(current[k].shape)}")
    if trainer.sharded:
        _load_whole_into_shards(trainer, weights, optim, uri)
        return
    with torch.no_grad():
        if trainer.cfg.adapter is not None:
            from peft import set_peft_model_state_dict

            with trainer.master_weights():  # into the fp32 masters; bf16 copies re-rounded on exit
                set_peft_model_state_dict(trainer.model, weights)
        else:
            trainer.model.load_state_dict(weights, strict=True)
    trainer.optimizer.load_state_dict(optim)


def _load_whole_into_shards(trainer: Trainer, weights: dict[str, torch.Tensor], optim: dict[str, Any], uri: str) -> None:
    """Every rank holds the whole tensors; each keeps its own shards (cut locally, no communication)."""
    if trainer.cfg.adapter is not None:
        from peft import get_peft_model_state_dict

        # The adapter file's keys (peft's, without the adapter name) -> this model's parameters.
        targets = get_peft_model_state_dict(trainer.model, state_dict=trainer.model.state_dict(keep_vars=True))
    else:
        targets = trainer.model.state_dict(keep_vars=True)
    missing = sorted(set(targets) - set(weights))
    if missing:
        raise CheckpointError(f"checkpoint {uri}: has no tensor {missing[0]}, which this model trains. "
                              "Fix: load it with the trainer_config it was written with")
    params = trainer.params
    for i, st in optim["state"].items():
        for k, v in st.items():
            if isinstance(v, torch.Tensor) and v.dim() and tuple(v.shape) != tuple(params[int(i)].shape):
                raise CheckpointError(f"checkpoint {uri}: optimiser state {k} of parameter {i} has shape {list(v.shape)}, "
                                      f"the parameter has {list(params[int(i)].shape)}")
    with torch.no_grad():
        for k, p in targets.items():
            p.copy_(distribute_like(weights[k], p))
    optim = {"state": {i: {k: distribute_like(v, params[int(i)]) if isinstance(v, torch.Tensor) and v.dim() else v
                           for k, v in st.items()} for i, st in optim["state"].items()},
             "param_groups": optim["param_groups"]}
    trainer.optimizer.load_state_dict(optim)
