"""The trainer's code version, for a step's lineage (docs/operations.md#lineage): the package version and
a sha256 over every Python source of ratchet_trainer (relative path and bytes, in path order), so two
trainers that report the same sha256 ran the same trainer code whatever their install or checkout."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent


def sources_sha256(root: Path = PACKAGE) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        if "__pycache__" in p.parts:
            continue
        rel = p.relative_to(root).as_posix().encode()
        data = p.read_bytes()
        h.update(len(rel).to_bytes(8, "big") + rel + len(data).to_bytes(8, "big") + data)
    return h.hexdigest()


def code_version() -> dict[str, Any]:
    """{version, sha256, torch, threads}: the trainer's code, the torch build and its CPU thread count now
    (a bitwise CPU replay needs the same torch and, for some kernels, the same thread count)."""
    import torch

    return {**_package_version(), "torch": torch.__version__, "threads": torch.get_num_threads()}


@functools.lru_cache(maxsize=1)
def _package_version() -> dict[str, Any]:
    """{version, sha256}, computed once per process (the code a process runs does not change under it)."""
    try:
        from importlib.metadata import version

        v = version("ratchet-trainer")
    except Exception:  # noqa: BLE001 - not installed as a package (run from the checkout): the sha256 still names it
        v = "unknown"
    return {"version": v, "sha256": sources_sha256()}
