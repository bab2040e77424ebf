"""Fetch pinned sdists from PyPI (through pip) into a cache, verify sha256, unpack."""

from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from .config import Package

log = logging.getLogger(__name__)


class SdistError(RuntimeError):
    pass


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def fetch(pkg: Package, cache: Path) -> Path:
    """Path to the verified sdist in `cache`, downloading it with pip if missing."""
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / pkg.sdist
    if not target.exists():
        log.info("downloading %s==%s sdist into %s", pkg.name, pkg.version, cache)
        cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
               "--dest", str(cache), f"{pkg.name}=={pkg.version}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SdistError(f"pip download {pkg.name}=={pkg.version} failed:\n{proc.stderr[-2000:]}")
        if not target.exists():
            raise SdistError(f"pip downloaded {pkg.name}=={pkg.version} but {target} is missing; "
                             f"fix 'sdist' in packages.toml (found: {sorted(p.name for p in cache.iterdir())})")
    got = sha256_file(target)
    if got != pkg.sha256:
        raise SdistError(f"sha256 mismatch for {target}: packages.toml pins {pkg.sha256}, file has {got}. "
                         "Fix: delete the cached file if it is corrupt; if the upload really changed, "
                         "review it and update the pin")
    return target


def unpack(pkg: Package, sdist: Path, dest: Path) -> Path:
    """Unpack into dest (replacing it) and return the package root directory."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    root = dest / pkg.root
    if not root.is_dir():
        raise SdistError(f"{sdist} has no top directory {pkg.root!r}; fix 'root' in packages.toml")
    return root
