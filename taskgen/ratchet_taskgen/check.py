"""Check a generated task set the way a sandbox uses it: fetch the task commit alone,
FAIL_TO_PASS must fail, the gold patch must apply and make FAIL_TO_PASS and
PASS_TO_PASS pass."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def check_row(task_dir: Path, row: dict, work: Path) -> str | None:
    """None when the row is sound, else what is wrong."""
    repo = task_dir / row["source"]["repo_path"]
    git = ["git", "-C", str(work)]
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    subprocess.run(git + ["fetch", "-q", "--depth", "1", f"file://{repo}", row["base_commit"]], check=True)
    subprocess.run(git + ["checkout", "-q", "FETCH_HEAD"], check=True)
    # the row's test_cmd starts with python3; use this interpreter (pytest 7.2.1, as in the sandbox)
    cmd = [sys.executable, *row["test_cmd"].split()[1:]]
    env = {"PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    before = subprocess.run(cmd + row["FAIL_TO_PASS"], cwd=work, capture_output=True, env=env).returncode
    if before != 1:
        return f"FAIL_TO_PASS exit {before} on base_commit (expected 1)"
    applied = subprocess.run(git + ["apply"], input=row["patch"].encode(), capture_output=True)
    if applied.returncode != 0:
        return f"gold patch does not apply: {applied.stderr.decode()[-300:]}"
    after = subprocess.run(cmd + row["FAIL_TO_PASS"] + row["PASS_TO_PASS"], cwd=work, capture_output=True, env=env)
    if after.returncode != 0:
        return f"tests exit {after.returncode} after the gold patch: {after.stdout.decode()[-300:]}"
    return None


def check_task_set(task_dir: Path, files: tuple[str, ...] = ("train.jsonl", "heldout.jsonl")) -> dict[str, str]:
    rows = [json.loads(line) for f in files if (task_dir / f).exists()
            for line in (task_dir / f).read_text(encoding="utf-8").splitlines()]
    bad: dict[str, str] = {}
    for i, row in enumerate(rows, 1):
        with tempfile.TemporaryDirectory(prefix="ratchet-taskgen-check-") as tmp:
            problem = check_row(task_dir, row, Path(tmp) / "work")
        if problem:
            bad[row["instance_id"]] = problem
            log.error("%s: %s", row["instance_id"], problem)
        if i % 20 == 0:
            log.info("checked %d/%d rows, %d bad", i, len(rows), len(bad))
    log.info("checked %d rows, %d bad", len(rows), len(bad))
    return bad
