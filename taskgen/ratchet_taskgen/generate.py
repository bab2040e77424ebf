"""Generate a verified task set: plant bugs, keep those the package's own tests catch.

Pipeline per package: fetch + verify the sdist, unpack, commit the clean source,
run the suite once on clean with a per-test call trace (which tests execute which
function), enumerate mutation sites in covered functions, then verify candidates
in parallel, in a fixed order, until the target is met:

  bug run    the tests that execute the mutated function, on the buggy tree
  keep if    >= 1 test that passed on clean now fails (FAIL_TO_PASS)
  gold run   `git apply` the gold patch to the buggy tree; FAIL_TO_PASS must pass

Results are consumed in candidate order, so the kept set depends only on the seed,
the package pins and the code, not on timing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import logging
import multiprocessing as mp
import os
import random
import shutil
import subprocess
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from . import __version__, snapshot
from .config import Package
from .mutations import MutationError, Site, apply_site, find_sites, function_first_lines
from .runner import run_pytest
from .sdist import fetch, unpack
from .statement import write_statement

log = logging.getLogger(__name__)

TEST_CMD_DEFAULT = "python3 -m pytest -q -p no:cacheprovider"
MAX_PASS_TO_PASS = 20
HELDOUT_PERCENT = 20


@dataclass
class Options:
    out: Path
    cache: Path
    seed: int = 0
    target: int = 160
    workers: int = 2
    max_sites_per_function: int = 3
    max_kept_per_function: int = 2
    run_timeout: float = 30.0


@dataclass
class Baseline:
    """What the clean suite tells us about one package."""

    pkg: Package
    src: Path  # pristine unpacked tree (never modified)
    repo: Path
    clean_commit: str
    outcomes: dict[str, dict[str, str]]
    covering: dict[tuple[str, str], list[str]]  # (file, function) -> node ids executing it
    seconds: float


@dataclass
class Candidate:
    index: int  # position in the package's ordered candidate list: part of instance_id
    pkg_key: str
    site: Site


@dataclass
class Outcome:
    candidate: Candidate
    status: str  # "kept" or a drop reason
    detail: str = ""
    digest: str = ""  # of the mutated file, to drop duplicate bugs
    base_commit: str = ""
    patch: str = ""
    fail_to_pass: list[str] = field(default_factory=list)
    pass_to_pass: list[str] = field(default_factory=list)
    messages: dict[str, str] = field(default_factory=dict)


def split_of(instance_id: str) -> str:
    h = int(hashlib.sha256(instance_id.encode()).hexdigest()[:8], 16)
    return "heldout" if h % 100 < HELDOUT_PERCENT else "train"


def selectable(nodeid: str) -> bool:
    """Whether the sandbox can run this test by node id: pytest 7.2 splits a command-line
    argument at every "::", so a parameter id holding one (an IPv6 URL) cannot be named."""
    params = nodeid.partition("[")[2]
    return "::" not in params


def source_files(pkg: Package, root: Path) -> list[str]:
    files = []
    for d in pkg.source_dirs:
        for p in sorted((root / d).rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            if any(rel == e or rel.startswith(e.rstrip("/") + "/") for e in pkg.exclude):
                continue
            files.append(rel)
    return files


# --- baseline ---------------------------------------------------------------------


def prepare_package(pkg: Package, opts: Options) -> Baseline:
    sdist = fetch(pkg, opts.cache)
    work = opts.out / ".work" / pkg.key
    src = unpack(pkg, sdist, work / "pristine")
    repo = opts.out / "repos" / f"{pkg.key}.git"
    if repo.exists():
        shutil.rmtree(repo)
    snapshot.init_repo(repo)
    clean = snapshot.commit_tree(repo, src, f"{pkg.name} {pkg.version}")
    snapshot.set_ref(repo, "refs/heads/main", clean)

    run_dir = work / "baseline"
    if run_dir.exists():
        shutil.rmtree(run_dir)
    shutil.copytree(src, run_dir)
    t0 = time.monotonic()
    result, trace = run_pytest(run_dir, list(pkg.test_paths), timeout=600, trace_out=work / "trace.json")
    seconds = time.monotonic() - t0
    if not result.outcomes:
        raise RuntimeError(f"{pkg.key}: the clean test suite produced no results "
                           f"(exit {result.returncode}):\n{result.output[-2000:]}")
    log.info("%s: clean suite %d passed, %d failed, %.1fs (traced)", pkg.key, len(result.passed()),
             len(result.failed()), seconds)

    by_line: dict[tuple[str, int], str] = {}
    for rel in source_files(pkg, src):
        tree = ast.parse((src / rel).read_text(encoding="utf-8"))
        for qualname, lines in function_first_lines(tree).items():
            for line in lines:
                by_line[(rel, line)] = qualname
    covering: dict[tuple[str, str], set[str]] = {}
    for nodeid, keys in trace.items():
        for rel, line in keys:
            qualname = by_line.get((rel, line))
            if qualname is not None:
                covering.setdefault((rel, qualname), set()).add(nodeid)
    return Baseline(pkg, src, repo, clean, result.outcomes,
                    {k: sorted(v) for k, v in covering.items()}, seconds)


def enumerate_candidates(base: Baseline, opts: Options, stats: Counter) -> list[Candidate]:
    """Sites in covered functions, a bounded seeded sample per function, seeded order."""
    rng = random.Random(f"{opts.seed}:{base.pkg.key}")
    chosen: list[Site] = []
    for rel in source_files(base.pkg, base.src):
        source = (base.src / rel).read_text(encoding="utf-8")
        by_func: dict[str, list[Site]] = {}
        for site in find_sites(source, rel):
            by_func.setdefault(site.function, []).append(site)
        for func, sites in by_func.items():
            stats["sites_total"] += len(sites)
            if not base.covering.get((rel, func)):
                stats["sites_in_untested_functions"] += len(sites)
                continue
            rng.shuffle(sites)
            chosen += sites[: opts.max_sites_per_function]
    # Balance operator kinds: round-robin over kinds, each in seeded order.
    by_kind: dict[str, list[Site]] = {}
    for site in chosen:
        by_kind.setdefault(site.kind, []).append(site)
    for sites in by_kind.values():
        rng.shuffle(sites)
    ordered = list(_round_robin([by_kind[k] for k in sorted(by_kind)]))
    return [Candidate(i, base.pkg.key, site) for i, site in enumerate(ordered)]


def _round_robin(lists: list[list]) -> Iterator:
    for i in range(max((len(x) for x in lists), default=0)):
        for x in lists:
            if i < len(x):
                yield x[i]


def interleave(lists: list[list[Candidate]]) -> Iterator[Candidate]:
    """Round-robin over packages so every package is represented while the target is met."""
    return _round_robin(lists)


# --- verification (runs in worker processes) ------------------------------------

_BASELINES: dict[str, Baseline] = {}
_OPTS: Options | None = None


def _workspace(base: Baseline) -> Path:
    ws = _OPTS.out / ".work" / base.pkg.key / f"ws-{os.getpid()}"  # type: ignore[union-attr]
    if not ws.exists():
        shutil.copytree(base.src, ws)
    return ws


def verify(cand: Candidate) -> Outcome:
    base = _BASELINES[cand.pkg_key]
    opts = _OPTS
    assert opts is not None
    site = cand.site
    ws = _workspace(base)
    target = ws / site.file
    clean_source = (base.src / site.file).read_text(encoding="utf-8")
    # Mutants are made here, in the workers: most candidates are never tried.
    try:
        source = apply_site(clean_source, site).source
    except MutationError as exc:
        return Outcome(cand, "mutation_not_clean", detail=str(exc))
    digest = hashlib.sha256(f"{site.file}\0{source}".encode()).hexdigest()
    try:
        return _verify(cand, base, opts, ws, target, clean_source, source, digest)
    finally:
        target.write_text(clean_source, encoding="utf-8")


def _verify(cand: Candidate, base: Baseline, opts: Options, ws: Path, target: Path, clean_source: str,
            source: str, digest: str) -> Outcome:
    site = cand.site
    covering = base.covering[(site.file, site.function)]
    paths = sorted({t.split("::", 1)[0] for t in covering})
    # Also run a seeded sample of the files' other tests, so PASS_TO_PASS is verified
    # on the buggy tree and is not just the tests of the mutated function.
    rng = random.Random(f"{opts.seed}:{cand.pkg_key}:{cand.index}")
    others = sorted(t for t, r in base.outcomes.items() if r["outcome"] == "passed"
                    and t.split("::", 1)[0] in paths and t not in set(covering))
    tests = sorted(set(covering) | set(rng.sample(others, min(MAX_PASS_TO_PASS, len(others)))))
    target.write_text(source, encoding="utf-8")
    bug, _ = run_pytest(ws, paths, select=tests, timeout=opts.run_timeout)
    if bug.timed_out:
        return Outcome(cand, digest=digest, status="timeout")
    if not bug.outcomes:
        return Outcome(cand, digest=digest, status="collection_error", detail=bug.output[-500:])
    clean_pass = {t for t in tests if base.outcomes.get(t, {}).get("outcome") == "passed" and selectable(t)}
    newly_failing = sorted(bug.failed() & clean_pass)
    if not newly_failing:
        if bug.failed():
            return Outcome(cand, digest=digest, status="test_fails_also_on_clean")
        return Outcome(cand, digest=digest, status="no_test_fails")

    buggy_commit = snapshot.commit_with_file(base.repo, base.clean_commit, site.file, source,
                                             f"{base.pkg.name} {base.pkg.version}")
    patch = snapshot.diff(base.repo, buggy_commit, base.clean_commit)
    # The work tree may sit inside another git repository (.ratchet/ in the project):
    # stop git from finding it, or `git apply` would resolve paths against its root.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CEILING_DIRECTORIES"] = str(ws.parent)
    applied = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], input=patch, text=True,
                             cwd=ws, capture_output=True, env=env)
    if applied.returncode != 0 or target.read_text(encoding="utf-8") != clean_source:
        return Outcome(cand, digest=digest, status="gold_does_not_apply",
                       detail=applied.stderr[-500:])
    gold, _ = run_pytest(ws, paths, select=newly_failing, timeout=opts.run_timeout)
    if gold.timed_out or not set(newly_failing) <= gold.passed():
        return Outcome(cand, digest=digest, status="gold_does_not_restore")
    both = sorted((bug.passed() & clean_pass) - set(newly_failing))
    p2p = sorted(rng.sample(both, min(MAX_PASS_TO_PASS, len(both))))
    messages = {t: bug.outcomes[t]["message"] for t in newly_failing}
    return Outcome(cand, digest=digest, status="kept", base_commit=buggy_commit, patch=patch,
                   fail_to_pass=newly_failing, pass_to_pass=p2p, messages=messages)


# --- driver -------------------------------------------------------------------------


def _row(base: Baseline, o: Outcome, seed: int) -> dict:
    c = o.candidate
    iid = f"{base.pkg.key}__{c.site.kind}__{c.index:04d}"
    return {
        "instance_id": iid,
        "repo": base.pkg.name,
        "version": base.pkg.version,
        "base_commit": o.base_commit,
        "problem_statement": write_statement(base.pkg.name, o.fail_to_pass, o.messages, o.patch),
        "patch": o.patch,
        "test_patch": "",
        "FAIL_TO_PASS": o.fail_to_pass,
        "PASS_TO_PASS": o.pass_to_pass,
        "gold_files": [c.site.file],
        "gold_functions": [f"{c.site.file}::{c.site.function}"],
        "mutation": {"kind": c.site.kind, "file": c.site.file, "line": c.site.line},
        "test_cmd": base.pkg.test_cmd,
        "source": {"type": "snapshot", "repo_path": f"repos/{base.pkg.key}.git"},
        "split": split_of(iid),
        "created_by": f"ratchet-taskgen {__version__} seed={seed}",
    }


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(path)


def generate(packages: list[Package], opts: Options) -> dict:
    global _OPTS
    t_start = time.monotonic()
    opts.out.mkdir(parents=True, exist_ok=True)
    stats: Counter = Counter()
    bases: dict[str, Baseline] = {}
    lists = []
    for pkg in packages:
        base = prepare_package(pkg, opts)
        bases[pkg.key] = base
        cands = enumerate_candidates(base, opts, stats)
        log.info("%s: %d candidate bugs in %d tested functions", pkg.key, len(cands), len(base.covering))
        lists.append(cands)
    t_prepared = time.monotonic()

    _BASELINES.clear()
    _BASELINES.update(bases)
    _OPTS = opts
    seen_sources: set[str] = set()
    kept_per_function: Counter = Counter()
    kept: list[Outcome] = []
    per_package: dict[str, Counter] = {k: Counter() for k in bases}

    # Pool.imap pulls candidates in its own thread, ahead of the results: anything
    # that depends on earlier results (the per-function quota) is decided here, in
    # result order, to stay deterministic.
    # fork: workers inherit the baselines without pickling them
    ctx = mp.get_context("fork")
    tried = 0
    with ctx.Pool(opts.workers) as pool:
        for outcome in pool.imap(verify, interleave(lists), chunksize=1):
            tried += 1
            c = outcome.candidate
            per_package[c.pkg_key]["tried"] += 1
            func = (c.pkg_key, c.site.file, c.site.function)
            if outcome.digest:
                if outcome.digest in seen_sources and outcome.status == "kept":
                    outcome.status = "duplicate_diff"
                seen_sources.add(outcome.digest)
            if outcome.status == "kept" and kept_per_function[func] >= opts.max_kept_per_function:
                outcome.status = "function_quota_full"
            if outcome.status == "kept":
                kept.append(outcome)
                kept_per_function[func] += 1
                per_package[c.pkg_key]["kept"] += 1
            else:
                stats[f"dropped:{outcome.status}"] += 1
                per_package[c.pkg_key][f"dropped:{outcome.status}"] += 1
            if tried % 10 == 0 or len(kept) >= opts.target:
                log.info("progress: tried %d, kept %d/%d, %.0fs", tried, len(kept), opts.target,
                         time.monotonic() - t_start)
            if len(kept) >= opts.target:
                pool.terminate()
                break

    rows = [_row(bases[o.candidate.pkg_key], o, opts.seed) for o in kept]
    for o, row in zip(kept, rows):
        snapshot.set_ref(bases[o.candidate.pkg_key].repo, f"refs/tasks/{row['instance_id']}", row["base_commit"])
    for base in bases.values():
        snapshot.prune(base.repo)
        shutil.rmtree(opts.out / ".work" / base.pkg.key, ignore_errors=True)
    shutil.rmtree(opts.out / ".work", ignore_errors=True)
    rows.sort(key=lambda r: r["instance_id"])
    _write_jsonl(opts.out / "train.jsonl", [r for r in rows if r["split"] == "train"])
    _write_jsonl(opts.out / "heldout.jsonl", [r for r in rows if r["split"] == "heldout"])

    report = {
        "created_by": f"ratchet-taskgen {__version__} seed={opts.seed}",
        "target": opts.target,
        "tried": tried,
        "kept": len(kept),
        "train": sum(r["split"] == "train" for r in rows),
        "heldout": sum(r["split"] == "heldout" for r in rows),
        "by_kind": dict(sorted(Counter(r["mutation"]["kind"] for r in rows).items())),
        "counts": dict(sorted(stats.items())),
        "packages": {
            k: {"clean_tests": len(b.outcomes), "clean_suite_traced_seconds": round(b.seconds, 1),
                "tested_functions": len(b.covering), **dict(sorted(per_package[k].items()))}
            for k, b in bases.items()
        },
        "seconds": {"prepare": round(t_prepared - t_start, 1), "verify": round(time.monotonic() - t_prepared, 1),
                    "total": round(time.monotonic() - t_start, 1)},
        "workers": opts.workers,
    }
    (opts.out / "yield.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if len(kept) < opts.target:
        log.warning("only %d verified tasks for a target of %d: candidates ran out", len(kept), opts.target)
    return report
