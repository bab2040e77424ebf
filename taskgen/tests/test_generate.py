"""End to end on a toy package: bugs are kept only when its tests catch them and the
gold patch, applied with git to the task's base commit, makes them pass again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ratchet_taskgen.generate import Options, generate
from ratchet_taskgen.sdist import SdistError, fetch
from ratchet_taskgen.statement import changed_lines

REQUIRED = {"instance_id", "repo", "version", "base_commit", "problem_statement", "patch", "test_patch",
            "FAIL_TO_PASS", "PASS_TO_PASS", "gold_files", "gold_functions", "mutation", "test_cmd", "source",
            "split", "created_by"}


def _rows(out: Path) -> list[dict]:
    return [json.loads(line) for name in ("train.jsonl", "heldout.jsonl")
            for line in (out / name).read_text().splitlines()]


@pytest.fixture
def generated(toy, tmp_path: Path) -> tuple[Path, dict]:
    pkg, cache = toy
    out = tmp_path / "tasks"
    report = generate([pkg], Options(out=out, cache=cache, seed=0, target=6, workers=1))
    return out, report


def test_rows_are_verified_tasks(generated, tmp_path: Path) -> None:
    out, report = generated
    rows = _rows(out)
    assert report["kept"] == len(rows) >= 3
    for row in rows:
        assert REQUIRED <= set(row)
        assert row["FAIL_TO_PASS"], row["instance_id"]
        assert "tests/test_toy.py::test_unrelated" not in row["FAIL_TO_PASS"]
        assert row["gold_files"] == ["toy/__init__.py"]
        assert row["gold_functions"][0].split("::")[1] in {"clamp", "window", "both"}
        assert not set(row["FAIL_TO_PASS"]) & set(row["PASS_TO_PASS"])
        # the function nobody tests is never a target
        assert "untested" not in row["gold_functions"][0]

        # what a sandbox does: fetch the task commit alone, run the failing tests,
        # apply the gold patch, run them again
        work = tmp_path / row["instance_id"]
        repo = out / row["source"]["repo_path"]
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        subprocess.run(["git", "-C", str(work), "fetch", "-q", "--depth", "1", f"file://{repo}",
                        f"refs/tasks/{row['instance_id']}"], check=True)
        subprocess.run(["git", "-C", str(work), "checkout", "-q", "FETCH_HEAD"], check=True)
        head = subprocess.run(["git", "-C", str(work), "rev-parse", "HEAD"], capture_output=True, text=True)
        assert head.stdout.strip() == row["base_commit"]
        log = subprocess.run(["git", "-C", str(work), "log", "--oneline"], capture_output=True, text=True)
        assert len(log.stdout.splitlines()) == 1, "the task commit must not carry the clean parent"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *row["FAIL_TO_PASS"]]
        env = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/usr/bin:/bin"}
        assert subprocess.run(cmd, cwd=work, capture_output=True, env=env).returncode == 1
        subprocess.run(["git", "-C", str(work), "apply"], input=row["patch"].encode(), check=True)
        done = subprocess.run(cmd + row["PASS_TO_PASS"], cwd=work, capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stdout


def test_problem_statement_does_not_leak_the_patch(generated) -> None:
    out, _ = generated
    for row in _rows(out):
        for line in changed_lines(row["patch"]):
            assert line not in row["problem_statement"], (row["instance_id"], line)
        assert row["FAIL_TO_PASS"][0] in row["problem_statement"]


def test_yield_report_counts_every_try(generated) -> None:
    out, report = generated
    on_disk = json.loads((out / "yield.json").read_text())
    assert on_disk["kept"] == report["kept"]
    drops = sum(v for k, v in on_disk["counts"].items() if k.startswith("dropped:") and k != "dropped:duplicate_diff")
    assert on_disk["tried"] == on_disk["kept"] + drops


def test_same_seed_same_task_set(toy, generated, tmp_path: Path) -> None:
    """Commit SHAs, patches and statements are a pure function of inputs and seed."""
    pkg, cache = toy
    out, _ = generated
    again = tmp_path / "again"
    generate([pkg], Options(out=again, cache=cache, seed=0, target=6, workers=2))
    assert (out / "train.jsonl").read_text() == (again / "train.jsonl").read_text()
    assert (out / "heldout.jsonl").read_text() == (again / "heldout.jsonl").read_text()


def test_sha256_mismatch_fails_clearly(toy) -> None:
    pkg, cache = toy
    bad = pkg.__class__(**{**pkg.__dict__, "sha256": "0" * 64})
    with pytest.raises(SdistError, match="sha256 mismatch"):
        fetch(bad, cache)
