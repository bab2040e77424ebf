"""Deterministic git snapshots of package sources.

One bare repository per package. The clean sdist source is the first commit on
`main`. Each task's buggy source is its own *root* commit (no parent) kept alive by
`refs/tasks/<instance_id>`: with a parent, `git show` inside the sandbox would print
the gold patch. Author, committer, dates and messages are fixed, so every SHA is a
pure function of the file contents.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

_IDENT = {
    "GIT_AUTHOR_NAME": "ratchet-taskgen",
    "GIT_AUTHOR_EMAIL": "taskgen@ratchet.invalid",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "ratchet-taskgen",
    "GIT_COMMITTER_EMAIL": "taskgen@ratchet.invalid",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
    # the user's config (gpg signing, hooks, autocrlf) must not change a SHA
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


class GitError(RuntimeError):
    pass


def git(repo: Path, *args: str, input: str | None = None, env: dict[str, str] | None = None,
        work_tree: Path | None = None) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full_env.update(_IDENT)
    full_env["GIT_DIR"] = str(repo)
    if work_tree is not None:
        full_env["GIT_WORK_TREE"] = str(work_tree)
    full_env.update(env or {})
    proc = subprocess.run(["git", *args], input=input, capture_output=True, text=True, env=full_env)
    if proc.returncode != 0:
        raise GitError(f"git {' '.join(args)} in {repo} failed: {proc.stderr.strip()}")
    return proc.stdout


def init_repo(repo: Path) -> None:
    repo.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "--quiet", "--bare", "--initial-branch=main")
    # lets a sandbox fetch one task commit by sha with --depth 1
    git(repo, "config", "uploadpack.allowAnySHA1InWant", "true")
    git(repo, "config", "core.autocrlf", "false")


def commit_tree(repo: Path, source_root: Path, message: str) -> str:
    """Commit every file under source_root as a root commit; returns its sha."""
    with tempfile.TemporaryDirectory(prefix="ratchet-taskgen-idx-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "add", "--all", "--force", ".", env=env, work_tree=source_root)
        tree = git(repo, "write-tree", env=env).strip()
    return git(repo, "commit-tree", tree, "-m", message).strip()


def commit_with_file(repo: Path, base: str, path: str, content: str, message: str) -> str:
    """A root commit whose tree is base's tree with one file replaced (mode kept)."""
    blob = git(repo, "hash-object", "-w", "--stdin", input=content).strip()
    mode = git(repo, "ls-tree", base, "--", path).split()[0]
    with tempfile.TemporaryDirectory(prefix="ratchet-taskgen-idx-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "read-tree", base, env=env)
        git(repo, "update-index", "--cacheinfo", f"{mode},{blob},{path}", env=env)
        tree = git(repo, "write-tree", env=env).strip()
    return git(repo, "commit-tree", tree, "-m", message).strip()


def diff(repo: Path, old: str, new: str) -> str:
    """Unified diff in git format from commit old to commit new."""
    return git(repo, "diff", "--no-color", "--no-ext-diff", "--no-renames", "--full-index", old, new)


def set_ref(repo: Path, ref: str, sha: str) -> None:
    git(repo, "update-ref", ref, sha)


def prune(repo: Path) -> None:
    """Drop objects of rejected mutants (unreferenced) and pack the rest."""
    git(repo, "reflog", "expire", "--expire=now", "--all")
    git(repo, "gc", "--quiet", "--prune=now")
