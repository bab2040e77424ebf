"""A real trainer process for the recovery test: load (checkpoint), apply one step, save.

With --sleep it pauses after each micro-batch (after touching --marker), so the
test can kill it in the middle of a step.
"""

import argparse
import json
import time
from pathlib import Path

import torch

from ratchet_trainer.core import Trainer, load_batch, parse_trainer_config, restore_checkpoint, save_checkpoint

ap = argparse.ArgumentParser()
ap.add_argument("--job", type=Path, required=True)
args = ap.parse_args()
job = json.loads(args.job.read_text())
torch.set_num_threads(1)
trainer = Trainer(job["run_id"], parse_trainer_config(job["trainer_config"]))
if job.get("checkpoint"):
    restore_checkpoint(trainer, job["checkpoint"])


def heartbeat(progress):
    if progress["micro_batch"] == 0:  # the step's start: kill inside it, after real work
        return
    Path(job["marker"]).write_text(json.dumps(progress))
    time.sleep(job.get("sleep", 0))


metrics = trainer.step(job["step"], load_batch(job["batch"], job["manifest"]), heartbeat=heartbeat)
refs = save_checkpoint(trainer, Path(job["artifacts"]), job["step"])
Path(job["out"]).write_text(json.dumps({"metrics": metrics, "refs": refs}))
