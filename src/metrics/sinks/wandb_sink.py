"""W&B sink for Ratchet's step metrics (there is no official Node W&B SDK).

Run by the main worker once per recorded step, with one JSON object on stdin:
  {"project", "entity", "mode", "dir", "run_id", "step", "scalars", "config"}
It logs the scalars at that step to the W&B run whose id is the Ratchet run id.
In "offline" mode (the default) nothing touches the network: each call leaves an
offline run directory under <dir>/wandb/, and `wandb sync <dir>/wandb/offline-run-*`
uploads them later, all to the same run id. Prints the run directory.
"""
import json
import logging
import os
import re
import sys


def main() -> None:
    req = json.load(sys.stdin)
    os.environ.setdefault("WANDB_SILENT", "true")
    os.environ["WANDB_MODE"] = req.get("mode", "offline")
    os.makedirs(req["dir"], exist_ok=True)
    import wandb  # imported late: the environment above must be set first

    logging.getLogger("wandb").setLevel(logging.ERROR)
    run_id = re.sub(r"[^A-Za-z0-9_-]", "-", req["run_id"])[:128]
    run = wandb.init(
        project=req.get("project") or "ratchet",
        entity=req.get("entity"),
        id=run_id,
        name=req["run_id"],
        dir=req["dir"],
        mode=req.get("mode", "offline"),
        resume="allow" if req.get("mode") == "online" else None,
        config=req.get("config") or None,
        settings=wandb.Settings(console="off", save_code=False, x_disable_stats=True, x_disable_meta=True),
    )
    run.log({k: float(v) for k, v in req["scalars"].items()}, step=int(req["step"]))
    print(run.dir)
    run.finish(quiet=True)


if __name__ == "__main__":
    main()
