"""Runs mini-swe-agent (PyPI mini-swe-agent 2.4.6, unchanged) on one Ratchet rollout.

mini-swe-agent's environment interface is `execute(action, cwd, timeout) -> {output, returncode,
exception_info}`; RatchetEnvironment implements it against the rollout's sandbox through the bridge,
with the same submission convention as its LocalEnvironment (first output line
COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT raises Submitted). Its default agent and tool-calling litellm
model are used as shipped (config/mini.yaml); the model is pointed at the rollout's endpoint.
"""
import os
import platform
import sys
from pathlib import Path

import yaml

import minisweagent
from minisweagent.agents.default import DefaultAgent
from minisweagent.exceptions import Submitted
from minisweagent.models.litellm_model import LitellmModel

from ratchet_harness.client import Bridge, print_final, read_spec, serve_loopback


class RatchetEnvironment:
    def __init__(self, bridge: Bridge, timeout: float):
        self.bridge = bridge
        self.config = {"cwd": bridge.workdir, "timeout": timeout}

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict:
        command = action.get("command", "")
        try:
            r = self.bridge.exec(command, timeout_s=timeout or self.config["timeout"], cwd=cwd or self.bridge.workdir)
            out = r.get("stdout", "") + (r.get("stderr", "") or "")
            output = {"output": out, "returncode": r.get("exit_code") if r.get("exit_code") is not None else -1,
                      "exception_info": "the command timed out and was killed" if r.get("timed_out") else ""}
        except Exception as e:  # the bridge itself failed: told to the model, as LocalEnvironment does
            output = {"output": "", "returncode": -1, "exception_info": f"An error occurred while executing the command: {e}"}
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict):
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if lines and lines[0].strip() == "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" and output["returncode"] == 0:
            submission = "".join(lines[1:])
            raise Submitted({"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}})

    def get_template_vars(self, **kwargs) -> dict:
        u = platform.uname()._asdict()
        return {**self.config, **u, **kwargs}

    def serialize(self) -> dict:
        return {"info": {"config": {"environment": self.config, "environment_type": "ratchet_harness.mswea_runner.RatchetEnvironment"}}}


def main():
    spec = read_spec()
    port = serve_loopback(spec["socket"])
    args = spec.get("args", {})
    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / "mini.yaml").read_text())
    agent_cfg = dict(config.get("agent", {}))
    agent_cfg.update(step_limit=int(spec["limits"]["max_turns"]), cost_limit=0, wall_time_limit_seconds=int(spec["timeout_s"]), output_path=None)
    model_cfg = dict(config.get("model", {}))
    model_cfg.update(model_name="openai/" + spec["model"], cost_tracking="ignore_errors",
                     model_kwargs={**model_cfg.get("model_kwargs", {}), "api_base": f"http://127.0.0.1:{port}/v1", "api_key": spec["key"],
                                   "max_tokens": int(spec["max_tokens_per_turn"])})
    model_cfg.pop("model_class", None)
    model = LitellmModel(**model_cfg)
    env = RatchetEnvironment(Bridge(spec["socket"], spec["key"], spec["workdir"]), float(spec["exec_timeout_s"]))
    result = DefaultAgent(model, env, **agent_cfg).run(spec["instruction"])
    status = result.get("exit_status", "")
    if status != "Submitted" and not args.get("final_without_submit"):
        print(f"mini-swe-agent ended with {status or 'no exit status'}, not a submission", file=sys.stderr)
        return 0  # no RATCHET_FINAL line: Ratchet records "exited without a final answer"
    print_final({"submission": result.get("submission", ""), "exit_status": status})
    return 0


if __name__ == "__main__":
    sys.exit(main())
