"""Trains a tiny CPU run through the worker's commands and prints each step's refs as JSON, for the
`ratchet replay-step` unit test (test/unit/cli/replayStep.test.ts), which records them as step records.

    python tests/replay_run.py <artifacts root> <run id> <steps>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

# This checkout's ratchet_trainer (not whichever the venv installed), and the tests' helpers.
sys.path[:0] = [str(Path(__file__).parents[1]), str(Path(__file__).parent)]

from helpers import make_cfg, make_samples, on_policy_batch  # noqa: E402
from ratchet_trainer.commands import TrainerCommands  # noqa: E402


def main(root: Path, run_id: str, steps: int) -> None:
    cmds = TrainerCommands(root, owner="replay-run")
    cmds.load({"run_id": run_id, "trainer_config": make_cfg(lora={"rank": 8, "alpha": 16, "dropout": 0.1}).to_dict()})
    out = []
    for s in range(steps):
        adv = [(1.0, -1.0, 0.5, -0.5), (-0.5, 1.0, -1.0, 0.5)][s % 2]
        samples = make_samples(cmds.trainer.vocab_size, advantages=adv, seed=s)
        batch, manifest = on_policy_batch(cmds.trainer, root / "runs" / run_id / "batches", samples, s, run_id=run_id)
        cmds.step({"run_id": run_id, "step": s, "batch": batch, "manifest": manifest})
        saved = cmds.save({"run_id": run_id, "step": s})
        out.append({"step": s, "batch": batch, "manifest": manifest, "checkpoint": saved["checkpoint"],
                    "adapter": saved["adapter"], "lr": cmds.trainer.cfg.optim.lr, "seed": cmds.trainer.cfg.seed})
    print(json.dumps(out))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
