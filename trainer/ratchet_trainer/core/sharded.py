"""Sharded checkpoint state: the trainable tensors and the optimiser's, written by every rank with
torch.distributed.checkpoint (DCP) and readable at any world size.

`<checkpoint>/sharded/` holds DCP's `.metadata` and one `__<rank>_0.distcp` per saving rank. Its
keys are torch's flattened `get_state_dict` layout: `model.<fqn>` for each trainable parameter
(fp32), `optim.state.<fqn>.<exp_avg|exp_avg_sq|step>` and `optim.param_groups.<fqn>.<lr|betas|...>`.
The metadata records each tensor's global shape and which slices each file holds, so a reader
with any sharding (another world size, or one process) reads just the slices it needs.

Tensors only change after `check_sharded_fits` compared the metadata with this model.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import torch

from .errors import CheckpointError

SHARDED = "sharded"


def _options(strict: bool = True):
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # Frozen base weights are not the run's state (the base model is rebuilt from its path), so a
    # load is not strict: check_sharded_fits compared the trainable keys and shapes beforehand.
    return StateDictOptions(ignore_frozen_params=True, flatten_optimizer_state_dict=True, strict=strict)


def trainable_params(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """Each trainable parameter under its state-dict key (a tied parameter under each of its keys);
    under FSDP2 these are the DTensor parameters, whose .shape is the global shape."""
    return {k: v for k, v in model.state_dict(keep_vars=True).items()
            if isinstance(v, torch.nn.Parameter) and v.requires_grad}


def save_sharded(trainer: Any, d: Path) -> None:
    """Every rank writes its shards of the trainable and optimiser state into d/sharded (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options())
    dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(d / SHARDED))


def read_sharded_metadata(root: Path):
    from torch.distributed.checkpoint import FileSystemReader

    return FileSystemReader(str(root / SHARDED)).read_metadata()


def check_sharded_fits(trainer: Any, root: Path, uri: str) -> None:
    """A sharded checkpoint whose tensors do not match this model (another adapter rank, other target
    modules) fails here, naming the first difference, before any state is touched."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    fix = "Fix: load it with the trainer_config (model and lora) it was written with, or start from scratch"
    saved = read_sharded_metadata(root).state_dict_metadata
    want = {f"model.{k}": tuple(p.shape) for k, p in trainable_params(trainer.model).items()}
    have = {k: tuple(md.size) for k, md in saved.items() if k.startswith("model.") and isinstance(md, TensorStorageMetadata)}
    for k in sorted(want):
        if k not in have:
            raise CheckpointError(f"checkpoint {uri}: sharded state has no tensor {k[6:]}, which this model trains "
                                  f"({len(have)} saved, {len(want)} expected). {fix}")
        if have[k] != want[k]:
            raise CheckpointError(f"checkpoint {uri}: sharded tensor {k[6:]} has shape {list(have[k])}, "
                                  f"this model's has {list(want[k])}. {fix}")
    for k in sorted(have):
        if k not in want:
            raise CheckpointError(f"checkpoint {uri}: sharded state holds tensor {k[6:]}, which this model does not train. {fix}")
    for k, md in sorted(saved.items()):
        if not k.startswith("optim.state."):
            continue
        fqn = k[len("optim.state."):].rsplit(".", 1)[0]
        shape = want.get(f"model.{fqn}")
        if shape is None:
            raise CheckpointError(f"checkpoint {uri}: optimiser state {k} is for a parameter this model does not train. {fix}")
        if isinstance(md, TensorStorageMetadata) and tuple(md.size) not in (shape, ()):
            raise CheckpointError(f"checkpoint {uri}: optimiser state {k} has shape {list(md.size)}, "
                                  f"the parameter has {list(shape)}. {fix}")


def load_sharded(trainer: Any, root: Path) -> None:
    """Load d/sharded into the trainer: resharded to this world size by DCP, or read whole by one
process or by each replicated rank."""
    if trainer.sharded:
        _load_sharded_ranks(trainer, root)
    else:
        _load_sharded_single(trainer, root)


def _load_sharded_ranks(trainer: Any, root: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    # Templates with this run's sharding (get_state_dict gives an empty optimiser its state with one
    # zero-lr step, overwritten by the load); DCP reads each rank's slices into them.
    model_sd, optim_sd = get_state_dict(trainer.model, trainer.optimizer, options=_options())
    state = {"model": model_sd, "optim": optim_sd}
    dcp.load(state, checkpoint_id=str(root / SHARDED))
    set_state_dict(trainer.model, trainer.optimizer, model_state_dict=state["model"],
                   optim_state_dict=state["optim"], options=_options(strict=False))


def _load_sharded_single(trainer: Any, root: Path) -> None:
    """One process, no process group: DCP reads every shard into whole tensors (its no-process-group
    path). Not through get/set_state_dict: on one GPU the optimiser steps fp32 masters that are not
    the model's (bf16) parameters, which set_state_dict cannot map to names; so the flat keys are
    mapped onto the optimiser's own (index-keyed) state dict here."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    sharded = root / SHARDED
    meta = read_sharded_metadata(root).state_dict_metadata
    state: dict[str, Any] = {k: torch.empty(md.size, dtype=md.properties.dtype) if isinstance(md, TensorStorageMetadata) else None
                             for k, md in meta.items()}
    with warnings.catch_warnings():  # DCP warns that it assumes one process: that is the intent here
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(sharded), no_dist=True)

    params = trainable_params(trainer.model)
    # What the optimiser steps for each model parameter: itself, or its fp32 master.
    stepped = {id(p): p for p in trainer.params}
    if trainer.master is not None:
        stepped = {id(p): m for p, m in zip(trainer.master.params, trainer.master.masters)}
    opt = trainer.optimizer
    index_of = {id(t): i for i, t in enumerate(t for g in opt.param_groups for t in g["params"])}
    keys_of: dict[int, list[str]] = {}  # optimiser index -> the parameter's keys (a tied one has several)
    for k, p in params.items():
        keys_of.setdefault(index_of[id(stepped[id(p)])], []).append(k)

    def saved(i: int, section: str) -> dict[str, Any]:
        for k in keys_of.get(i, []):
            prefix = f"optim.{section}.{k}."
            found = {s[len(prefix):]: v for s, v in state.items() if s.startswith(prefix)}
            if found:
                return found
        return {}

    sd = opt.state_dict()
    new_state = {i: st for i in keys_of if (st := saved(i, "state"))}
    for g in sd["param_groups"]:  # the saved hyperparameters (lr...), as optimizer.pt restores them
        if g["params"]:
            g.update({k: v for k, v in saved(g["params"][0], "param_groups").items() if k in g and k != "params"})

    with torch.no_grad():
        for k, p in params.items():
            stepped[id(p)].copy_(state[f"model.{k}"])
        if trainer.master is not None:
            trainer.master.sync()
    opt.load_state_dict({"state": new_state, "param_groups": sd["param_groups"]})


def distribute_like(value: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """A whole tensor (every rank holds it) as `like`'s shards: a DTensor with like's mesh and
    placements, cut locally (no communication); a plain tensor for an unsharded `like`."""
    value = value.to(device=like.device, dtype=like.dtype)
    if not hasattr(like, "device_mesh"):
        return value
    from torch.distributed.tensor import distribute_tensor

    return distribute_tensor(value, like.device_mesh, like.placements, src_data_rank=None)
