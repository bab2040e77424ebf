"""A run's recorded batches through Trainer.step, with one trainer config change: time, processed tokens.

Replays the batches of a run's steps (steps/<n>/batch.safetensors + batch.json) in order on a fresh
Trainer built from the trainer config the run's first checkpoint recorded, with `--set key=value`
overrides (JSON values: shared_prefix=false, ac={"freq":0}), and prints one JSON line per step
(wall and CPU seconds, processed and trained tokens, tokens/s, loss) and the peak RSS. One process
per variant, so the peak is the variant's own. `--model-config` builds the model from a config.json
with random weights (same shapes and FLOPs) where the weights are not at hand (a device machine).

  python trainer/bench/bench_shared_prefix.py --run .ratchet/artifacts/runs/<run> --set shared_prefix=false
  python trainer/bench/bench_shared_prefix.py --run .ratchet/artifacts/runs/<run> --set shared_prefix=true
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import torch


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="a run's artifact directory (runs/<run_id>)")
    ap.add_argument("--set", action="append", default=[], help="trainer_config key=JSON value (top-level keys)")
    ap.add_argument("--model-config", help="config.json: random weights of this architecture instead of model.path")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--label", default="")
    ap.add_argument("--steps", help="comma-separated step numbers to replay (default: all); each on the initial adapter")
    args = ap.parse_args()

    from ratchet_trainer.core import Trainer
    from ratchet_trainer.core.artifacts import sha256_file
    from ratchet_trainer.core.batch import load_batch
    from ratchet_trainer.core.config import parse_trainer_config

    if args.threads:
        torch.set_num_threads(args.threads)
    run = Path(args.run)
    first = min(run.glob("checkpoints/step-*/trainer_state.json"), key=lambda p: int(p.parent.name.split("-")[1]))
    raw = json.loads(first.read_text())["trainer_config"]
    for kv in args.set:
        k, v = kv.split("=", 1)
        raw[k] = json.loads(v)
    if args.model_config:
        raw["model"] = {**raw["model"], "path": None, "config": json.loads(Path(args.model_config).read_text())}
    cfg = parse_trainer_config(raw)
    run_id = json.loads((run / "config.json").read_text()).get("runId") or run.name
    trainer = Trainer(run_id, cfg)
    for step_dir in sorted((run / "steps").iterdir(), key=lambda p: int(p.name)):
        bpath, mpath = step_dir / "batch.safetensors", step_dir / "batch.json"
        if not bpath.exists() or (args.steps and step_dir.name not in args.steps.split(",")):
            continue
        refs = [{"uri": p.resolve().as_uri(), "sha256": sha256_file(p), "bytes": p.stat().st_size} for p in (bpath, mpath)]
        batch = load_batch(*refs)
        batch.manifest = {**batch.manifest, "run_id": run_id}
        t0 = time.monotonic()
        m = trainer.step(int(step_dir.name), batch)
        wall = time.monotonic() - t0
        print(json.dumps({"label": args.label, "set": args.set, "step": m["step"], "wall_s": round(wall, 2),
                          "cpu_s": m["cpu_s"], "samples": m["samples"], "batch_tokens": m["total_tokens"],
                          "processed_tokens": m.get("processed_tokens"), "trained_tokens": m["tokens"],
                          "processed_per_trained": round(m.get("processed_per_trained", 0.0), 3),
                          "processed_tokens_per_s": round((m.get("processed_tokens") or 0) / wall, 1),
                          "trained_tokens_per_s": round(m["tokens"] / wall, 1), "micro_batches": m["micro_batches"],
                          "loss": m["loss"], "grad_norm": m["grad_norm"]}), flush=True)
    print(json.dumps({"label": args.label, "set": args.set, "peak_rss_gib": round(
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)}), flush=True)


if __name__ == "__main__":
    main()
