"""Where a training step's peak GPU memory goes, by the code that allocated it.

Builds the named architecture at random init (as replay_batches.py does), then for each
`--seq` runs RL-shaped batches (rl_batches.py) through `Trainer.step` and records the step's
peak allocated memory. For the last sequence length it also records the CUDA allocator's
history (torch.cuda.memory._record_memory_history), replays it to the moment of the peak and
groups the live blocks by the innermost frame in ratchet_trainer / transformers / peft: what
`ratchet check`'s estimate (src/check/gpu.ts, docs/gpu.md) must account for.

  PYTHONPATH=trainer python3 trainer/bench/memory_peak.py --model qwen3-8b --seqs 1024,2048,4096 \\
      --micro-batch-tokens 4096 --out $OUT/memory_peak.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from replay_batches import ARCH, batch_files, load  # noqa: E402
from rl_batches import write_rl_batches  # noqa: E402

from ratchet_trainer.core.config import parse_trainer_config  # noqa: E402
from ratchet_trainer.core.trainer import Trainer  # noqa: E402

OURS = ("ratchet_trainer", "transformers", "peft")


def frame_key(frames: list[dict]) -> str:
    """The innermost frame in our code or the model libraries, with the innermost torch frame under it."""
    inner = frames[0] if frames else None
    for f in frames:
        name = f.get("filename", "")
        if any(o in name for o in OURS):
            where = f"{name.split('site-packages/')[-1].split('trainer/')[-1]}:{f.get('line')} {f.get('name')}"
            if inner is not None and inner is not f:
                where += f"  <- {inner.get('name')}"
            return where
    return f"{inner.get('filename', '?').split('site-packages/')[-1]}:{inner.get('line')} {inner.get('name')}" if inner else "?"


def live_at_peak(snapshot: dict, base_bytes: int) -> tuple[int, dict[str, int]]:
    """Replays the allocator trace; returns the peak (bytes, including what was allocated before
    recording) and the bytes live at that moment, grouped by frame_key."""
    live: dict[int, tuple[int, str]] = {}
    total = peak = 0
    peak_live: dict[int, tuple[int, str]] = {}
    for trace in snapshot["device_traces"]:
        for ev in trace:
            action = ev["action"]
            if action == "alloc":
                live[ev["addr"]] = (ev["size"], frame_key(ev.get("frames", [])))
                total += ev["size"]
                if total > peak:
                    peak = total
                    peak_live = dict(live)
            elif action in ("free_requested",):
                got = live.pop(ev["addr"], None)
                if got is not None:
                    total -= got[0]
    groups: dict[str, int] = defaultdict(int)
    for size, key in peak_live.values():
        groups[key] += size
    return base_bytes + peak, dict(sorted(groups.items(), key=lambda kv: -kv[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(ARCH))
    ap.add_argument("--seqs", default="1024,2048,4096")
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--steps-per-seq", type=int, default=2)
    ap.add_argument("--lora-rank", type=int, default=4)
    ap.add_argument("--packing", choices=["on", "off"], default="on")
    ap.add_argument("--out", default="memory_peak.json")
    args = ap.parse_args()
    seqs = [int(s) for s in args.seqs.split(",")]
    cuda = torch.cuda.is_available()
    cfg = parse_trainer_config({
        "model": {"config": ARCH[args.model], "lora": {"rank": args.lora_rank, "alpha": 2 * args.lora_rank},
                  "ac": {"freq": 1}, "compile": False},
        "optim": {"lr": 1e-5}, "seq_len": max(seqs), "micro_batch_tokens": args.micro_batch_tokens,
        "device": "cuda" if cuda else "cpu", "seed": 0, "packing": args.packing == "on" and cuda,
    })
    rec: dict = {"argv": sys.argv, "gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
                 "seqs": []}
    out = Path(args.out)
    tr = None
    for i, seq in enumerate(seqs):
        last = i == len(seqs) - 1
        # A fresh trainer per length (rl_batches.py numbers each set's steps from 0, run_id "replay").
        del tr
        if cuda:
            torch.cuda.empty_cache()
        t0 = time.perf_counter()
        tr = Trainer("replay", cfg)
        rec.update(attn=tr.attn_implementation, packing=tr.packing, build_s=time.perf_counter() - t0,
                   after_build_gib=torch.cuda.memory_allocated() / 2**30 if cuda else None)
        with tempfile.TemporaryDirectory() as d:
            write_rl_batches(Path(d), args.steps_per_seq, seq=seq, vocab=ARCH[args.model]["vocab_size"])
            row: dict = {"seq": seq, "steps": []}
            for j, f in enumerate(batch_files(Path(d))):
                batch = load(f)
                record = cuda and last and j == args.steps_per_seq - 1  # the last step: warm kernels, one trace
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                    base = torch.cuda.memory_allocated()
                    if record:
                        torch.cuda.memory._record_memory_history(enabled="all", context="alloc", stacks="python",
                                                                 max_entries=3_000_000)
                s0 = time.perf_counter()
                m = tr.step(int(batch.manifest.get("step", j)), batch)
                if cuda:
                    torch.cuda.synchronize()
                lengths = batch.sample_lengths()
                row["steps"].append({"s": time.perf_counter() - s0, "tokens": m["total_tokens"],
                                     "micro_batches": m["micro_batches"], "longest_sample": max(lengths),
                                     "peak_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None})
                if record:
                    snap = torch.cuda.memory._snapshot()
                    torch.cuda.memory._record_memory_history(enabled=None)
                    peak, groups = live_at_peak(snap, base)
                    row["traced_peak_gib"] = peak / 2**30
                    row["live_at_peak_gib"] = {k: round(v / 2**30, 3) for k, v in list(groups.items())[:25]}
                print(f"seq {seq} step {j}: {row['steps'][-1]}", flush=True)
            rec["seqs"].append(row)
            out.write_text(json.dumps(rec, indent=1))
    out.write_text(json.dumps(rec, indent=1))


if __name__ == "__main__":
    main()
