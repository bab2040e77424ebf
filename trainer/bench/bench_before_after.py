"""Steady tokens/s of one trainer code tree against another, on the same RL-shaped batches.

Runs `Trainer.step` over every batch in `--batches` (rl_batches.py's files) with the
trainer package found under `--trainer-root`, so two checkouts (before and after a
change) can be timed on one GPU in one call, each in its own process:

  PYTHONPATH=trainer python3 trainer/bench/rl_batches.py --out /tmp/b --steps 10 --seq 2048
  python3 trainer/bench/bench_before_after.py --trainer-root old/trainer --batches /tmp/b --label before --out before.json
  python3 trainer/bench/bench_before_after.py --trainer-root trainer --batches /tmp/b --label after --out after.json

The trainer config uses the payload spellings both trees accept (model.lora, model.ac);
`--minibatches` > 1 needs a tree that has them. Steady tokens/s is the median over the
steps after `--warm`; the first step carries FlexAttention's compile.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ARCH = {
    "qwen3-4b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": True,
                 "rms_norm_eps": 1e-6},
    "qwen3-8b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "rms_norm_eps": 1e-6},
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trainer-root", required=True, help="directory holding the ratchet_trainer package to time")
    ap.add_argument("--batches", required=True, help="directory of batch-*.safetensors (+ .json) from rl_batches.py")
    ap.add_argument("--label", required=True)
    ap.add_argument("--model", default="qwen3-4b", choices=sorted(ARCH))
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--lora-rank", type=int, default=16)
    ap.add_argument("--minibatches", type=int, default=1)
    ap.add_argument("--warm", type=int, default=2)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    sys.path.insert(0, str(Path(args.trainer_root).resolve()))
    import torch

    from ratchet_trainer.core.artifacts import path_to_uri, sha256_file
    from ratchet_trainer.core.batch import load_batch
    from ratchet_trainer.core.config import parse_trainer_config
    from ratchet_trainer.core.trainer import Trainer

    def ref(p: Path) -> dict:
        return {"uri": path_to_uri(p), "sha256": sha256_file(p), "bytes": p.stat().st_size}

    payload = {
        "model": {"config": ARCH[args.model], "lora": {"rank": args.lora_rank, "alpha": 2 * args.lora_rank},
                  "ac": {"freq": 1}, "compile": False},
        "optim": {"lr": 1e-5}, "seq_len": args.seq, "micro_batch_tokens": args.micro_batch_tokens,
        "device": "cuda", "seed": 0,
        **({"minibatches": args.minibatches} if args.minibatches > 1 else {}),
    }
    t0 = time.perf_counter()
    tr = Trainer("replay", parse_trainer_config(payload))  # rl_batches.py writes run_id "replay"
    build_s = time.perf_counter() - t0
    steps = []
    for i, f in enumerate(sorted(Path(args.batches).glob("batch-*.safetensors"))):
        batch = load_batch(ref(f), ref(f.with_suffix(".json")))
        torch.cuda.synchronize()
        s0 = time.perf_counter()
        m = tr.step(int(batch.manifest.get("step", i)), batch)
        torch.cuda.synchronize()
        dt = time.perf_counter() - s0
        steps.append({"s": dt, "tokens": m["total_tokens"], "micro_batches": m["micro_batches"], "loss": m["loss"]})
        print(f"[{args.label}] step {i}: {dt:.2f}s {m['total_tokens']} tokens", flush=True)
    steady = [s["tokens"] / s["s"] for s in steps[args.warm:]]
    rec = {"label": args.label, "gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "model": args.model,
           "seq_len": args.seq, "lora_rank": args.lora_rank, "minibatches": args.minibatches, "build_s": build_s,
           "first_step_s": steps[0]["s"] if steps else None,
           "steady_tokens_per_s": statistics.median(steady) if steady else None, "steps": steps}
    Path(args.out).write_text(json.dumps(rec, indent=1))
    print(json.dumps({k: v for k, v in rec.items() if k != "steps"}), flush=True)


if __name__ == "__main__":
    main()
