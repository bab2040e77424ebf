"""Runs Nano (PyPI nano-agent 5.0.0, unchanged) on one Ratchet rollout.

Nano's execution environment is a pluggable class (nano.env.Environment); RatchetSandboxEnvironment
implements it against the rollout's sandbox through the bridge, so every `shell` and `apply_patch`
Nano performs happens in the hardened container, never on this host. Nano talks to the model through
litellm; litellm is pointed at the rollout's endpoint (via a loopback relay), which records tokens.
"""
import os
import sys

from nano import Agent
from nano.env import Environment, ShellResult

from ratchet_harness.client import Bridge, print_final, read_spec, serve_loopback


class RatchetSandboxEnvironment(Environment):
    def __init__(self, bridge: Bridge, exec_timeout_s: float):
        self.bridge = bridge
        self.exec_timeout_s = exec_timeout_s

    def start(self):
        pass

    def stop(self):
        pass

    def run_shell(self, cmd: str, timeout: int = 120) -> ShellResult:
        r = self.bridge.exec(cmd, timeout_s=min(timeout, self.exec_timeout_s))
        out = r.get("stdout", "") + (r.get("stderr", "") or "")
        code = r.get("exit_code")
        timed_out = bool(r.get("timed_out"))
        return ShellResult(stdout=out, returncode=124 if timed_out else (code if code is not None else 1), timed_out=timed_out)

    def read_file(self, path: str) -> str:
        return self.bridge.read(path)

    def write_file(self, path: str, content: str) -> None:
        self.bridge.write(path, content)

    def file_exists(self, path: str) -> bool:
        return self.bridge.exec("test -f " + _q(path))["exit_code"] == 0

    def is_git_repo(self) -> bool:
        return self.bridge.exec("test -d .git")["exit_code"] == 0

    def is_clean(self) -> bool:
        r = self.bridge.exec("git status --porcelain")
        return r["exit_code"] == 0 and r["stdout"].strip() == ""

    def get_diff(self) -> str:
        r = self.bridge.exec("git diff")
        return r["stdout"] if r["exit_code"] == 0 else ""


def _q(s):
    return "'" + s.replace("'", "'\\''") + "'"


def main():
    spec = read_spec()
    port = serve_loopback(spec["socket"])
    os.environ["OPENAI_API_KEY"] = spec["key"]  # in-process only: litellm's openai client reads it
    args = spec.get("args", {})
    limits = spec["limits"]
    agent = Agent(
        model="openai/" + spec["model"],
        api_base=f"http://127.0.0.1:{port}/v1",
        token_limit=int(args.get("token_limit", 8192)),
        tool_limit=int(limits["max_tool_calls"]),
        time_limit=int(spec["timeout_s"]),
        response_limit=int(spec["max_tokens_per_turn"]),
        log=False,
        env=RatchetSandboxEnvironment(Bridge(spec["socket"], spec["key"], spec["workdir"]), spec["exec_timeout_s"]),
    )
    diff = agent.run(spec["instruction"])
    print_final({"diff": diff, "tool_calls": agent.tool_usage})


if __name__ == "__main__":
    sys.exit(main())
