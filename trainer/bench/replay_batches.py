"""Replays training batches through the trainer's own step on a GPU, at random init.

Batches are files as the trainer reads them (`batch-NNNN.safetensors` + `.json`,
core/batch.py load_batch): recorded ones copied from a run's artifacts
(`runs/<run>/steps/<step>/batch.safetensors`, pass `runs/<run>/steps`), or RL-shaped ones from rl_batches.py (`--make N`).
The model is the named architecture at random init (no weights, no network);
each batch is one `Trainer.step`, exactly as the worker runs it.

Each variant runs in its own process (a fresh dynamo cache and CUDA allocator, and a
hung compile can be stopped at `--variant-timeout-s` without losing the others):
  eager                 model.compile = false
  compile               model.compile = true: the trainer's compile (model.py: dynamic
                        shapes, first layer's input requiring grad)
  compile-auto-dynamic  the same with dynamo's default shapes (static, then dynamic on a change)
  compile-before        the compile before this change: layer.compile(), no input-grad hook

Per step: wall time, tokens, micro-batches, graphs compiled so far, recompile-limit
hits, peak memory. Summary per variant: time to the first step, steady tokens/s
(median over steps after the first 3), and the step at which compile has paid back
its first-step cost against eager (`--compare eager`).

  PYTHONPATH=trainer python3 trainer/bench/replay_batches.py --model qwen3-8b --make 24 --seq 4096 \\
      --variants eager,compile --out $OUT/replay.json
  ... --memory-fraction 0.45 --variants eager     # the trainer's share of a GPU shared with vLLM
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ratchet_trainer.core.artifacts import path_to_uri, sha256_file  # noqa: E402
from ratchet_trainer.core.batch import load_batch  # noqa: E402
from ratchet_trainer.core.config import parse_trainer_config  # noqa: E402

ARCH = {
    "qwen3-8b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "rms_norm_eps": 1e-6},
    "qwen3-4b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": True,
                 "rms_norm_eps": 1e-6},
    "qwen3-14b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 5120, "intermediate_size": 17408,
                  "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                  "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                  "rms_norm_eps": 1e-6},
    "small": {"model_type": "qwen3", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 512,
              "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "max_position_embeddings": 8192, "tie_word_embeddings": False},
    "tiny": {"model_type": "qwen3", "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "max_position_embeddings": 8192, "tie_word_embeddings": False},
}

log = logging.getLogger("replay")


def _ref(p: Path) -> dict:
    return {"uri": path_to_uri(p), "sha256": sha256_file(p), "bytes": p.stat().st_size}


def batch_files(directory: Path) -> list[Path]:
    """Every `X.safetensors` with its `X.json` under `directory`: rl_batches.py's `batch-NNNN.*`, or a
    run's recorded `runs/<run>/steps/<step>/batch.*` (docs/contracts.md), in the order of their steps."""
    found = [p for p in directory.rglob("*.safetensors") if p.with_suffix(".json").is_file()]
    return sorted(found, key=lambda p: (json.loads(p.with_suffix(".json").read_text()).get("step", 0), str(p)))


def load(p: Path):
    return load_batch(_ref(p), _ref(p.with_suffix(".json")))  # type: ignore[arg-type]


def trainer_config(args, compile_flag: bool) -> dict:
    return {
        "model": {"config": ARCH[args.model], "lora": {"rank": args.lora_rank, "alpha": 2 * args.lora_rank},
                  "ac": {"freq": args.ac}, "compile": compile_flag, "dtype": args.dtype},
        "optim": {"lr": 1e-5}, "seq_len": args.seq, "micro_batch_tokens": args.micro_batch_tokens,
        "device": "cuda" if torch.cuda.is_available() else "cpu", "seed": 0,
        **({"packing": True} if torch.cuda.is_available() else {}),
    }


def run_variant(args) -> None:
    """One variant in this process: build, step over every batch, write JSON after each step."""
    from torch._dynamo.utils import counters

    from ratchet_trainer.core import model as model_mod
    from ratchet_trainer.core.trainer import Trainer

    variant = args.one_variant
    out = Path(args.out)
    cuda = torch.cuda.is_available()
    if cuda and args.memory_fraction:
        torch.cuda.set_per_process_memory_fraction(args.memory_fraction)
    rec: dict = {"variant": variant, "model": args.model, "seq_len": args.seq, "micro_batch_tokens": args.micro_batch_tokens,
                 "lora_rank": args.lora_rank, "ac_freq": args.ac, "memory_fraction": args.memory_fraction, "steps": [],
                 "gpu": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__}
    if cuda:
        rec["gpu_total_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30

    def save() -> None:
        out.write_text(json.dumps(rec, indent=1))

    t0 = time.perf_counter()
    cfg = parse_trainer_config(trainer_config(args, variant == "compile"))
    tr = Trainer("replay", cfg)
    if variant in ("compile-auto-dynamic", "compile-before"):
        if variant == "compile-auto-dynamic":
            model_mod.compile_layers(tr.model, dynamic=None)
        else:
            for layer in model_mod.decoder_layers(tr.model):
                layer.compile()
            conv = logging.getLogger("torch._dynamo.convert_frame")
            conv.addFilter(model_mod.COMPILE_WATCH)
    rec.update(build_s=time.perf_counter() - t0, attn=tr.attn_implementation, packing=tr.packing)
    if cuda:
        rec["after_build_allocated_gib"] = torch.cuda.memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
    save()
    files = batch_files(Path(args.batches))[: args.steps or None]
    deadline = time.monotonic() + args.variant_timeout_s if args.variant_timeout_s else None
    for step, f in enumerate(files):
        batch = load(f)
        if cuda:
            torch.cuda.synchronize()
            overall = max(rec.get("peak_allocated_gib", 0), torch.cuda.max_memory_allocated() / 2**30)
            rec["peak_allocated_gib"] = overall
            torch.cuda.reset_peak_memory_stats()  # each step's own peak below
        s0 = time.perf_counter()
        try:
            m = tr.step(int(batch.manifest.get("step", step)), batch)
        except Exception as e:  # an OOM under a memory cap is a result
            rec["error"] = f"{type(e).__name__}: {str(e)[:400]}"
            log.exception("step failed")
            save()
            break
        if cuda:
            torch.cuda.synchronize()
        dt = time.perf_counter() - s0
        rec["steps"].append({
            "step": step, "s": dt, "tokens": m["total_tokens"], "trainable": m["tokens"], "samples": m["samples"],
            "trajectories": m["trajectories"], "micro_batches": m["micro_batches"], "loss": m["loss"],
            "grad_norm": m["grad_norm"], "graphs": int(counters["stats"]["unique_graphs"]),
            "limit_hits": model_mod.COMPILE_WATCH.limit_hits,
            "peak_allocated_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            "peak_reserved_gib": torch.cuda.max_memory_reserved() / 2**30 if cuda else None,
            "oom_retry": m.get("micro_batch_tokens"),
        })
        print(f"[{variant}] step {step}: {dt:.2f}s {m['total_tokens']} tok, {m['micro_batches']} mb, "
              f"graphs {counters['stats']['unique_graphs']}, limit hits {model_mod.COMPILE_WATCH.limit_hits}", flush=True)
        save()
        if deadline is not None and time.monotonic() > deadline:
            rec["stopped"] = f"variant time budget {args.variant_timeout_s}s reached"
            break
    rec["limit_reason"] = model_mod.COMPILE_WATCH.last_reason
    rec["recompile_reasons"] = dict(counters.get("recompiles", {})) if "recompiles" in counters else None
    save()


def summarize(recs: list[dict], warm: int = 3) -> list[dict]:
    rows = []
    by = {r["variant"]: r for r in recs}
    eager = by.get("eager")
    for r in recs:
        st = r.get("steps", [])
        row = {"variant": r["variant"], "steps": len(st), "build_s": r.get("build_s"), "error": r.get("error"),
               "stopped": r.get("stopped"), "graphs": st[-1]["graphs"] if st else None,
               "limit_hits": st[-1]["limit_hits"] if st else None,
               "peak_allocated_gib": max((s["peak_allocated_gib"] or 0) for s in st) if st else None,
               "peak_reserved_gib": max((s["peak_reserved_gib"] or 0) for s in st) if st else None}
        if st:
            row["first_step_s"] = st[0]["s"]
            steady = st[warm:] if len(st) > warm else st[1:] or st
            tok = sum(s["tokens"] for s in steady)
            row["steady_tokens_per_s"] = tok / sum(s["s"] for s in steady)
            row["total_s"] = sum(s["s"] for s in st)
            row["tokens"] = sum(s["tokens"] for s in st)
        rows.append(row)
    # Pay-back: the step count after which the variant's cumulative time falls below eager's
    # (same batches, so cumulative times compare directly); extrapolated with steady rates.
    if eager and eager.get("steps"):
        e = eager["steps"]
        for row, r in zip(rows, recs):
            st = r.get("steps", [])
            if r is eager or not st or len(st) < 2:
                continue
            n = min(len(st), len(e))
            ce = cv = 0.0
            paid = None
            for i in range(n):
                ce += e[i]["s"]
                cv += st[i]["s"]
                if paid is None and cv <= ce:
                    paid = i + 1
            row["paid_back_at_step"] = paid
            e_rate = sum(x["s"] for x in e[warm:n]) / max(1, n - warm)
            v_rate = sum(x["s"] for x in st[warm:n]) / max(1, n - warm)
            row["saving_per_step_s"] = e_rate - v_rate
            row["extra_first_steps_s"] = sum(x["s"] for x in st[:warm]) - sum(x["s"] for x in e[:warm])
            if paid is None and e_rate > v_rate:
                row["paid_back_at_step_extrapolated"] = warm + row["extra_first_steps_s"] / (e_rate - v_rate)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="qwen3-8b", choices=sorted(ARCH))
    ap.add_argument("--batches", help="directory of batch-*.safetensors (+ .json); default: --make into a temp dir")
    ap.add_argument("--make", type=int, default=0, help="generate this many RL-shaped batches (rl_batches.py)")
    ap.add_argument("--template", default="mixed")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--lora-rank", type=int, default=4)
    ap.add_argument("--ac", type=int, default=1)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--variants", default="eager,compile")
    ap.add_argument("--variant-timeout-s", type=float, default=0)
    ap.add_argument("--kill-after-s", type=float, default=60,
                    help="a variant's process is killed this long after its time budget (a compile can hang a step)")
    ap.add_argument("--memory-fraction", type=float, default=0)
    ap.add_argument("--out", default="replay.json")
    ap.add_argument("--one-variant", help=argparse.SUPPRESS)
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    if args.one_variant:
        run_variant(args)
        return
    if not args.batches:
        from rl_batches import write_rl_batches

        args.batches = tempfile.mkdtemp(prefix="rl-batches-")
        write_rl_batches(Path(args.batches), args.make or 24, seq=args.seq, vocab=ARCH[args.model]["vocab_size"],
                         template=args.template)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    recs = []
    for v in args.variants.split(","):
        part = out.with_name(f"{out.stem}-{v}.json")
        cmd = [sys.executable, __file__, "--one-variant", v, "--out", str(part)] + [
            a for a in sys.argv[1:] if a not in ("--out", args.out)]
        if "--batches" not in sys.argv:
            cmd += ["--batches", args.batches]
        t0 = time.perf_counter()
        limit = args.variant_timeout_s + args.kill_after_s if args.variant_timeout_s else None
        try:
            subprocess.run(cmd, check=False, timeout=limit, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            print(f"[{v}] killed after {limit}s", flush=True)
        rec = json.loads(part.read_text()) if part.exists() else {"variant": v, "steps": []}
        rec["process_s"] = time.perf_counter() - t0
        recs.append(rec)
        summary = summarize(recs)
        out.write_text(json.dumps({"argv": sys.argv, "summary": summary, "runs": recs}, indent=1))
    print(f"\n{'variant':22} {'steps':>5} {'build s':>7} {'1st step s':>10} {'steady tok/s':>12} {'graphs':>6} "
          f"{'limit':>5} {'peak GiB':>8} {'paid back at':>12}")
    for r in summarize(recs):
        pb = r.get("paid_back_at_step") or (f"~{r['paid_back_at_step_extrapolated']:.0f}" if r.get("paid_back_at_step_extrapolated") else "-")
        print(f"{r['variant']:22} {r['steps']:5} {r['build_s'] or 0:7.1f} {r.get('first_step_s', 0):10.2f} "
              f"{r.get('steady_tokens_per_s', 0):12.0f} {r['graphs'] if r['graphs'] is not None else '-':>6} "
              f"{r['limit_hits'] if r['limit_hits'] is not None else '-':>5} {r['peak_allocated_gib'] or 0:8.1f} {pb:>12}"
              + (f"  {r['error'][:80]}" if r.get("error") else "") + (f"  ({r['stopped']})" if r.get("stopped") else ""))


if __name__ == "__main__":
    main()
