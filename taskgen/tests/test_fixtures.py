"""The shipped sample is a valid, self-contained task set."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from ratchet_taskgen.fixtures import FIXTURES, SAMPLE_ROWS, install_sample
from ratchet_taskgen.statement import changed_lines


def test_sample_is_small() -> None:
    total = sum(p.stat().st_size for p in FIXTURES.rglob("*") if p.is_file())
    assert total < 1_000_000, f"fixtures are {total} bytes; keep what the repo ships small"


def test_sample_tasks_check_out_and_gold_patch_applies(tmp_path: Path) -> None:
    rows_path = install_sample(tmp_path / "tasks")
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()]
    assert len(rows) >= 6
    assert len({r["repo"] for r in rows}) >= 2
    for row in rows:
        repo = tmp_path / "tasks" / row["source"]["repo_path"]
        work = tmp_path / row["instance_id"]
        subprocess.run(["git", "init", "-q", str(work)], check=True)
        subprocess.run(["git", "-C", str(work), "fetch", "-q", "--depth", "1", f"file://{repo}",
                        row["base_commit"]], check=True)
        subprocess.run(["git", "-C", str(work), "checkout", "-q", "FETCH_HEAD"], check=True)
        subprocess.run(["git", "-C", str(work), "apply", "--check"], input=row["patch"].encode(), check=True)
        for f in row["gold_files"]:
            assert (work / f).is_file()
        for line in changed_lines(row["patch"]):
            assert line not in row["problem_statement"]
    assert (FIXTURES / SAMPLE_ROWS).exists()
