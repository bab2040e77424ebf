"""packages.toml: which real packages bugs are planted in, pinned by version and sha256."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PACKAGES = Path(__file__).resolve().parent.parent / "packages.toml"


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    sdist: str
    sha256: str
    root: str
    source_dirs: tuple[str, ...]
    exclude: tuple[str, ...]
    test_paths: tuple[str, ...]
    test_cmd: str

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


_STR_FIELDS = ("name", "version", "sdist", "sha256", "root", "test_cmd")
_LIST_FIELDS = ("source_dirs", "exclude", "test_paths")


def load_packages(path: Path = DEFAULT_PACKAGES) -> list[Package]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{path}: not found. Fix: pass --packages with the path to packages.toml") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    rows = data.get("package")
    if not isinstance(rows, list) or not rows:
        raise ConfigError(f"{path}: expected at least one [[package]] table")
    out: list[Package] = []
    for i, row in enumerate(rows):
        where = f"{path}: package[{i}]"
        for f in _STR_FIELDS:
            if not isinstance(row.get(f), str) or not row[f]:
                raise ConfigError(f"{where}: field '{f}' must be a non-empty string")
        for f in _LIST_FIELDS:
            if not isinstance(row.get(f), list) or not all(isinstance(x, str) for x in row[f]):
                raise ConfigError(f"{where}: field '{f}' must be a list of strings")
        if not re.fullmatch(r"[0-9a-f]{64}", row["sha256"]):
            raise ConfigError(f"{where}: field 'sha256' must be 64 lowercase hex digits, got {row['sha256']!r}")
        unknown = set(row) - set(_STR_FIELDS) - set(_LIST_FIELDS)
        if unknown:
            raise ConfigError(f"{where}: unknown field(s) {sorted(unknown)}")
        out.append(Package(**{f: row[f] for f in _STR_FIELDS},
                           **{f: tuple(row[f]) for f in _LIST_FIELDS}))
    names = [p.name for p in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: duplicate package names in {names}")
    return out
