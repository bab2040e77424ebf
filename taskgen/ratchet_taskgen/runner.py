"""Run a package's tests in a work tree and read back per-test outcomes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

PYTEST_ARGS = ["-q", "-p", "no:cacheprovider", "-p", "ratchet_taskgen.pytest_plugin"]


@dataclass
class RunResult:
    outcomes: dict[str, dict[str, str]]  # nodeid -> {"outcome", "message"}
    returncode: int
    timed_out: bool
    output: str

    def passed(self) -> set[str]:
        return {n for n, r in self.outcomes.items() if r["outcome"] == "passed"}

    def failed(self) -> set[str]:
        return {n for n, r in self.outcomes.items() if r["outcome"] in ("failed", "error")}


def run_pytest(workdir: Path, paths: list[str], *, select: list[str] | None = None, timeout: float = 60.0,
               trace_out: Path | None = None, extra_env: dict[str, str] | None = None) -> tuple[RunResult, dict]:
    """Run `python -m pytest <paths>` in workdir. Returns the result and, if trace_out
    was asked for, the per-test trace {nodeid: [[file, firstlineno], ...]}."""
    with tempfile.TemporaryDirectory(prefix="ratchet-taskgen-run-") as tmp:
        results = Path(tmp) / "results.json"
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
        # A mutant may keep size and mtime second of the clean file: stale .pyc files
        # would silently test the wrong code, so never write bytecode.
        env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0", RATCHET_TASKGEN_RESULTS=str(results))
        if select is not None:
            sel = Path(tmp) / "select.txt"
            sel.write_text("\n".join(select) + "\n", encoding="utf-8")
            env["RATCHET_TASKGEN_SELECT"] = str(sel)
        if trace_out is not None:
            env["RATCHET_TASKGEN_TRACE"] = str(trace_out)
            env["RATCHET_TASKGEN_TRACE_ROOT"] = str(workdir)
        env.update(extra_env or {})
        cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *paths]
        proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, start_new_session=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            timed_out = False
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            timed_out = True
        outcomes = json.loads(results.read_text()) if results.exists() and not timed_out else {}
        trace = json.loads(trace_out.read_text()) if trace_out is not None and trace_out.exists() else {}
        return RunResult(outcomes, proc.returncode, timed_out, out[-4000:]), trace
