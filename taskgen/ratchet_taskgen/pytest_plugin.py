"""pytest plugin loaded into verification runs (`-p ratchet_taskgen.pytest_plugin`).

Driven by environment variables so the test command line stays the package's own:

- RATCHET_TASKGEN_RESULTS: write {nodeid: {"outcome", "message"}} as JSON here.
- RATCHET_TASKGEN_SELECT: a file of node ids, one a line; other collected tests are
  deselected (pytest 7.2 has no @argfile, and node-id lists can be long).
- RATCHET_TASKGEN_TRACE + RATCHET_TASKGEN_TRACE_ROOT: record, per test, which
  functions (file relative to the root, co_firstlineno) ran, so a mutation is
  verified only against the tests that execute the mutated function.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

_results: dict[str, dict[str, str]] = {}
_trace: dict[str, set[tuple[str, int]]] = {}
_current: list[str] = []


def _crash_message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None:
        return str(crash.message)
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # skip reports
        return str(longrepr[2])
    return str(longrepr or "")[-2000:]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    select = os.environ.get("RATCHET_TASKGEN_SELECT")
    if not select:
        return
    wanted = set(Path(select).read_text(encoding="utf-8").splitlines())
    keep = [i for i in items if i.nodeid in wanted]
    drop = [i for i in items if i.nodeid not in wanted]
    if drop:
        config.hook.pytest_deselected(items=drop)
    items[:] = keep


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    entry = _results.setdefault(report.nodeid, {"outcome": "passed", "message": ""})
    if report.when == "call":
        if entry["outcome"] != "error":
            entry["outcome"] = report.outcome
            entry["message"] = _crash_message(report) if report.outcome != "passed" else ""
    elif report.outcome == "failed" and entry["outcome"] in ("passed", "skipped"):
        # an error in setup or teardown breaks the test as much as a failed assert
        entry["outcome"] = "error"
        entry["message"] = _crash_message(report)
    elif report.outcome == "skipped" and report.when == "setup":
        entry["outcome"] = "skipped"
        entry["message"] = _crash_message(report)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    _current[:] = [item.nodeid]
    yield
    _current[:] = []


def _make_profiler(root: str):  # type: ignore[no-untyped-def]
    prefix = root.rstrip(os.sep) + os.sep
    seen: dict[object, tuple[str, int] | None] = {}

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event != "call" or not _current:
            return
        code = frame.f_code
        key = seen.get(code, False)
        if key is False:
            filename = code.co_filename
            key = (filename[len(prefix):], code.co_firstlineno) if filename.startswith(prefix) else None
            seen[code] = key
        if key is not None:
            _trace.setdefault(_current[0], set()).add(key)  # type: ignore[arg-type]

    return profile


def pytest_configure(config: pytest.Config) -> None:
    root = os.environ.get("RATCHET_TASKGEN_TRACE_ROOT")
    if os.environ.get("RATCHET_TASKGEN_TRACE") and root:
        profiler = _make_profiler(os.path.realpath(root))
        sys.setprofile(profiler)
        threading.setprofile(profiler)


def pytest_unconfigure(config: pytest.Config) -> None:
    sys.setprofile(None)
    threading.setprofile(None)  # type: ignore[arg-type]
    out = os.environ.get("RATCHET_TASKGEN_RESULTS")
    if out:
        Path(out).write_text(json.dumps(_results, sort_keys=True), encoding="utf-8")
    trace_out = os.environ.get("RATCHET_TASKGEN_TRACE")
    if trace_out:
        data = {nodeid: sorted([f, line] for f, line in keys) for nodeid, keys in _trace.items()}
        Path(trace_out).write_text(json.dumps(data, sort_keys=True), encoding="utf-8")
