"""Artifact references (claim checks) as in docs/contracts.md.

A file artifact's sha256 is over its bytes; a directory artifact's sha256 is over
its MANIFEST.sha256, which lists `sha256  relative/path` for every other file.
`bytes` of a directory is the sum of the sizes of the files it lists.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path
from typing import TypedDict
from urllib.parse import unquote, urlparse

from .io_progress import io_bytes

MANIFEST = "MANIFEST.sha256"


class ArtifactRef(TypedDict):
    uri: str
    sha256: str
    bytes: int


class ArtifactError(ValueError):
    """A missing or corrupt artifact; the message names the uri and both hashes."""


def uri_to_path(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        raise ArtifactError(f"artifact uri {uri!r} is not a file:// uri; only the local artifact store is supported by the trainer")
    return Path(unquote(parsed.path))


def path_to_uri(path: Path) -> str:
    return path.resolve().as_uri()


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
            io_bytes(len(chunk))
    return h.hexdigest()


def check_ref(ref: object, what: str) -> ArtifactRef:
    if not isinstance(ref, dict) or not isinstance(ref.get("uri"), str) or not isinstance(ref.get("sha256"), str):
        raise ArtifactError(f"{what} must be an artifact ref {{uri, sha256, bytes}}, got {ref!r}")
    return ref  # type: ignore[return-value]


def verify_file(ref: ArtifactRef, what: str) -> Path:
    """Return the local path of a file artifact after checking its sha256."""
    ref = check_ref(ref, what)
    path = uri_to_path(ref["uri"])
    if not path.is_file():
        raise ArtifactError(f"{what} {ref['uri']} does not exist. Fix: re-run the activity that wrote it")
    actual = sha256_file(path)
    if actual != ref["sha256"]:
        raise ArtifactError(
            f"{what} {ref['uri']} is corrupt: recorded sha256 {ref['sha256']}, found {actual}. "
            "Fix: re-run the activity that produced it"
        )
    return path


def write_manifest(root: Path) -> ArtifactRef:
    """Write root/MANIFEST.sha256 over every file below root and return root's ref."""
    lines, total = [], 0
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != MANIFEST:
            rel = p.relative_to(root).as_posix()
            lines.append(f"{sha256_file(p)}  {rel}\n")
            total += p.stat().st_size
    (root / MANIFEST).write_text("".join(lines))
    return {"uri": path_to_uri(root), "sha256": sha256_file(root / MANIFEST), "bytes": total}


def dir_ref(root: Path) -> ArtifactRef:
    """The ref of an existing directory artifact, from its manifest (not re-hashing content)."""
    man = root / MANIFEST
    total = 0
    for line in man.read_text().splitlines():
        total += (root / line.split("  ", 1)[1]).stat().st_size
    return {"uri": path_to_uri(root), "sha256": sha256_file(man), "bytes": total}


def verify_dir(ref: ArtifactRef, what: str) -> Path:
    """Check a directory artifact: the manifest's hash, then every file it lists."""
    ref = check_ref(ref, what)
    root = uri_to_path(ref["uri"])
    man = root / MANIFEST
    if not man.is_file():
        raise ArtifactError(f"{what} {ref['uri']} has no {MANIFEST}. Fix: point at a checkpoint written by trainer.save")
    actual = sha256_file(man)
    if actual != ref["sha256"]:
        raise ArtifactError(f"{what} {ref['uri']} is corrupt: recorded sha256 {ref['sha256']}, found {actual} for {MANIFEST}")
    for line in man.read_text().splitlines():
        digest, rel = line.split("  ", 1)
        p = root / rel
        got = sha256_file(p) if p.is_file() else "missing"
        if got != digest:
            raise ArtifactError(f"{what} {ref['uri']}: file {rel} has sha256 {got}, manifest says {digest}")
    return root


def tmp_sibling(final: Path) -> Path:
    """A temporary name in the same directory, so the final rename is atomic."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return final.parent / f".{final.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def commit_dir(tmp: Path, final: Path) -> None:
    """Rename a fully written temp directory into place; a concurrent identical writer may win."""
    try:
        os.rename(tmp, final)
    except OSError:
        if final.is_dir() and (final / MANIFEST).is_file():
            shutil.rmtree(tmp, ignore_errors=True)
            return
        raise


def atomic_write_bytes(final: Path, data: bytes) -> None:
    tmp = tmp_sibling(final)
    tmp.write_bytes(data)
    os.replace(tmp, final)
