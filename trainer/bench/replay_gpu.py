"""How closely `ratchet replay-step` reproduces a step on a GPU (issue 30: "bit for bit on the CPU,
within a documented tolerance on a GPU").

For each model and each determinism mode: a fresh trainer trains STEPS steps through the worker's own
commands (load, step, save), as a run does; then every step is replayed (ratchet_trainer.replay:
the parent checkpoint restored into a fresh Trainer, the stored batch applied) and the replayed
adapter is compared with the recorded one: sha256 equal or not, and the largest absolute and
relative difference over the adapter's tensors.

Modes: "default" (cuBLAS/cuDNN free to pick non-deterministic kernels) and "deterministic"
(torch.use_deterministic_algorithms(True) with CUBLAS_WORKSPACE_CONFIG=:4096:8).

    PYTHONUNBUFFERED=1 python3 trainer/bench/replay_gpu.py --device cuda --out results.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))

import torch  # noqa: E402

from helpers import TINY, make_samples, on_policy_batch  # noqa: E402
from ratchet_trainer.commands import TrainerCommands  # noqa: E402
from ratchet_trainer.core.config import parse_trainer_config  # noqa: E402
from ratchet_trainer.replay import replay_step  # noqa: E402

# SmolLM2-135M's architecture, randomly initialised (no download): real kernel shapes.
SMOL = {"model_type": "llama", "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "max_position_embeddings": 2048, "tie_word_embeddings": True}
MODELS = {"tiny": (TINY, (16, 20, 12, 18), 6, 64), "smollm2-135m-arch": (SMOL, (400, 520, 310, 460), 80, 1024)}
ADVANTAGES = [(1.0, -1.0, 0.5, -0.5), (-0.5, 1.0, -1.0, 0.5), (0.25, 0.75, -1.0, -0.25)]


def run_case(model: str, mode: str, device: str, steps: int, dtype: str) -> dict:
    arch, lengths, prompt, seq = MODELS[model]
    torch.use_deterministic_algorithms(mode == "deterministic", warn_only=False)
    raw = parse_trainer_config({
        "model": {"config": arch, "dtype": dtype}, "lora": {"rank": 16, "alpha": 32, "dropout": 0.05}, "ac": {"freq": 1},
        "optim": {"lr": 2e-3, "weight_decay": 0.0}, "loss": {"normalization": "token"},
        "seq_len": max(seq, max(lengths)), "micro_batch_tokens": 1024, "device": device, "seed": 0,
    }).to_dict()
    root = Path(tempfile.mkdtemp(prefix=f"replay-{model}-{mode}-"))
    cmds = TrainerCommands(root, owner="bench")
    cmds.load({"run_id": "r", "trainer_config": raw})
    records = []
    t0 = time.time()
    for s in range(steps):
        samples = make_samples(cmds.trainer.vocab_size, lengths=lengths, prompt=prompt, advantages=ADVANTAGES[s % 3], seed=s)
        batch, manifest = on_policy_batch(cmds.trainer, root / "batches", samples, s, run_id="r")
        metrics, _ = cmds.step({"run_id": "r", "step": s, "batch": batch, "manifest": manifest})
        saved = cmds.save({"run_id": "r", "step": s})
        records.append({"step": s, "batch": batch, "manifest": manifest, **saved, "loss": metrics.get("loss")})
    train_s = time.time() - t0
    out = []
    for s, rec in enumerate(records):
        req = {"run_id": "r", "step": s, "batch": rec["batch"], "manifest": rec["manifest"],
               "checkpoint": rec["checkpoint"], "adapter": rec["adapter"],
               "parent_checkpoint": records[s - 1]["checkpoint"] if s else None}
        # In this process (the kernels it already chose), and in a fresh one (`ratchet replay-step`'s case:
        # its own autotuning and kernel choices), as the CLI runs it.
        same = replay_step(req)
        path = root / f"replay-{s}.json"
        path.write_text(json.dumps(req))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")])}
        code = (f"import sys, torch; torch.use_deterministic_algorithms({mode == 'deterministic'}); "
                f"from ratchet_trainer.replay import main; sys.exit(main(['--request', {str(path)!r}]))")
        proc = subprocess.run([sys.executable, "-c", code],
                              capture_output=True, text=True, env=env, cwd=str(HERE.parent))
        try:
            fresh = json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, json.JSONDecodeError):
            fresh = {"error": proc.stderr[-400:]}
        keys = ("match", "max_abs_diff", "max_rel_diff")
        out.append({"step": s, "same_process": {k: same.get(k) for k in keys},
                    "fresh_process": {k: fresh.get(k) for k in keys} if "error" not in fresh else fresh})
    return {"model": model, "mode": mode, "device": device, "dtype": dtype, "steps": steps, "train_s": round(train_s, 2),
            "gpu": torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch": torch.__version__, "replays": out}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--models", default="smollm2-135m-arch")  # tiny: head_dim 16, which flex attention cannot lower on CUDA
    ap.add_argument("--out", default="replay_gpu.json")
    a = ap.parse_args()
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    results = []
    for model in a.models.split(","):
        for mode in ("default", "deterministic"):
            try:
                res = run_case(model, mode, a.device, a.steps, a.dtype)
            except Exception as err:  # a mode the kernels refuse is a result, not a crash of the bench
                res = {"model": model, "mode": mode, "error": f"{type(err).__name__}: {err}"}
            results.append(res)
            print(json.dumps(res), flush=True)
    Path(a.out).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
