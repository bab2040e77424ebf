"""Snapshot SHAs are reproducible: same files, same commits, anywhere, any time."""

from __future__ import annotations

import os
import time
from pathlib import Path

from ratchet_taskgen import snapshot


def _build(tmp: Path, name: str) -> tuple[str, str]:
    src = tmp / f"src-{name}"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("def f(x):\n    return x < 1\n")
    (src / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "run.sh", 0o755)
    repo = tmp / f"{name}.git"
    snapshot.init_repo(repo)
    clean = snapshot.commit_tree(repo, src, "pkg 1.0")
    bug = snapshot.commit_with_file(repo, clean, "pkg/a.py", "def f(x):\n    return x > 1\n", "pkg 1.0")
    return clean, bug


def test_same_sources_give_same_shas(tmp_path: Path) -> None:
    first = _build(tmp_path, "one")
    time.sleep(1.1)  # a clock-dependent date would show up as a different SHA
    second = _build(tmp_path, "two")
    assert first == second
    assert len(set(first)) == 2


def test_task_commit_is_a_root_commit_and_diff_is_the_gold_patch(tmp_path: Path) -> None:
    clean, bug = _build(tmp_path, "one")
    repo = tmp_path / "one.git"
    assert snapshot.git(repo, "rev-list", "--count", bug).strip() == "1"
    patch = snapshot.diff(repo, bug, clean)
    assert patch.startswith("diff --git a/pkg/a.py b/pkg/a.py\n")
    assert "-    return x > 1\n+    return x < 1\n" in patch
    assert "run.sh" not in patch  # modes and other files untouched
