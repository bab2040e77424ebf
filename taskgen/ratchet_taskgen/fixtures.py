"""A small task sample shipped in the repository, so tests downstream can run
before the full task set is generated.

`make_sample` copies chosen rows of a generated set and packs the snapshot commits
they need into git bundles (taskgen/fixtures/repos/<pkg>-<version>.bundle);
`install_sample` unpacks them into a task-set directory laid out exactly like a
generated one (sample.jsonl + repos/<pkg>-<version>.git).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from . import snapshot

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SAMPLE_ROWS = "sample_tasks.jsonl"


def make_sample(task_dir: Path, instance_ids: list[str], dest: Path = FIXTURES) -> list[dict]:
    rows = {}
    for name in ("train.jsonl", "heldout.jsonl"):
        for line in (task_dir / name).read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            rows[row["instance_id"]] = row
    missing = [i for i in instance_ids if i not in rows]
    if missing:
        raise KeyError(f"instance ids not in {task_dir}: {missing}")
    chosen = [rows[i] for i in sorted(instance_ids)]
    (dest / "repos").mkdir(parents=True, exist_ok=True)
    by_repo: dict[str, list[str]] = {}
    for row in chosen:
        by_repo.setdefault(row["source"]["repo_path"], []).append(f"refs/tasks/{row['instance_id']}")
    for repo_path, refs in sorted(by_repo.items()):
        bundle = dest / "repos" / (Path(repo_path).stem + ".bundle")
        snapshot.git(task_dir / repo_path, "bundle", "create", "--quiet", str(bundle), *refs)
    (dest / SAMPLE_ROWS).write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in chosen),
                                    encoding="utf-8")
    return chosen


def install_sample(out: Path, src: Path = FIXTURES) -> Path:
    """Lay the shipped sample out as a task set in `out`; returns the JSONL path."""
    out.mkdir(parents=True, exist_ok=True)
    for bundle in sorted((src / "repos").glob("*.bundle")):
        repo = out / "repos" / f"{bundle.stem}.git"
        if repo.exists():
            shutil.rmtree(repo)
        snapshot.init_repo(repo)
        snapshot.git(repo, "fetch", "--quiet", str(bundle), "refs/tasks/*:refs/tasks/*")
    rows = out / SAMPLE_ROWS
    shutil.copyfile(src / SAMPLE_ROWS, rows)
    return rows
