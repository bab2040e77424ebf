from __future__ import annotations

import hashlib
import io
import tarfile
from pathlib import Path

import pytest

from ratchet_taskgen.config import Package

TOY_SOURCE = '''\
"""A toy package: small functions with a real test suite."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def window(seq, n):
    return [seq[i:i + n] for i in range(len(seq) - n + 1)]


def both(a, b):
    return bool(a) and bool(b)


def untested(x):
    return x * 2
'''

TOY_TESTS = '''\
from toy import both, clamp, window


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_window():
    assert window([1, 2, 3], 2) == [[1, 2], [2, 3]]


def test_both():
    assert both(1, 1) and not both(1, 0) and not both(0, 1)


def test_unrelated():
    assert sorted([3, 1]) == [1, 3]
'''


def make_sdist(directory: Path, name: str = "toy", version: str = "0.1") -> Path:
    """A deterministic sdist tarball of the toy package."""
    root = f"{name}-{version}"
    files = {f"{root}/{name}/__init__.py": TOY_SOURCE, f"{root}/tests/test_{name}.py": TOY_TESTS,
             f"{root}/tests/__init__.py": ""}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path, text in sorted(files.items()):
            data = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    out = directory / f"{root}.tar.gz"
    directory.mkdir(parents=True, exist_ok=True)
    out.write_bytes(buf.getvalue())
    return out


def toy_package(sdist: Path, name: str = "toy", version: str = "0.1") -> Package:
    return Package(name=name, version=version, sdist=sdist.name,
                   sha256=hashlib.sha256(sdist.read_bytes()).hexdigest(), root=f"{name}-{version}",
                   source_dirs=(name,), exclude=(), test_paths=("tests",),
                   test_cmd="python3 -m pytest -q -p no:cacheprovider")


@pytest.fixture
def toy(tmp_path: Path) -> tuple[Package, Path]:
    cache = tmp_path / "cache"
    sdist = make_sdist(cache)
    return toy_package(sdist), cache
