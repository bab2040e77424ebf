"""Multi-GPU benchmark of the training core on 1..N GPUs of one host: the replicated path or FSDP2
(`--parallelism`, as `trainer.parallelism`; auto picks as the trainer does, parallelism.py).

Two modes in one file:
- the driver (run directly): starts one `torchrun` per configuration, collects each
  rank-0 result, and computes scaling efficiency against the 1-GPU run of the same
  model and per-GPU batch (weak scaling: each rank trains the same number of samples);
- the rank (started by torchrun, RANK set): builds the model with the trainer's own
  code, trains `--steps` timed steps after one warm-up, and rank 0 writes a JSON result.

Scaling efficiency = tokens/s on N GPUs / (N x tokens/s on 1 GPU). With `--baseline` (a
bench_train.py result of the same model, seq and checkpointing), each run's tokens/s is also
divided by that single-process figure (`speedup_vs_baseline`). Random init of the named
architecture (nothing downloads). Each model is built whole on every GPU before sharding, so
the largest model tried is bounded by one GPU's memory for bf16 weights, unless `--meta-init`
(FSDP2 only): then the model is built on the meta device, sharded, and each rank draws random
values for its own shards (`materialise`), as the pretrained path never holds a whole copy on a
GPU (sharded_init.py). Peak memory is the steps' (counted from after the build; the build's own
peak is `build_peak_gib_max_rank`). Compile, padding and
micro-batches are bench_train.py's: `torch.compile` on CUDA (`--no-compile` for eager), one
sample of `--seq` tokens per micro-batch.

Usage (on the GPU box):
  python3 trainer/bench/bench_dist.py --gpus 1,2 --models qwen3-8b,qwen3-32b --out $OUT/dist.json
  python3 trainer/bench/bench_dist.py --tiny --gpus 1,2 --out /tmp/dist.json   # CPU (gloo) check of the script
  python3 trainer/bench/bench_dist.py --gpus 2 --via-worker --out $OUT/worker.json
  python3 trainer/bench/bench_dist.py --gpus 2,4 --ac 1,0 --parallelism replicate --baseline $OUT/train.json --out $OUT/rep.json
  python3 trainer/bench/bench_dist.py --gpus 4 --method full --seq 8192 --samples 1 --parallelism fsdp --models qwen3-4b,qwen3-8b
  python3 trainer/bench/bench_dist.py --gpus 4 --parallelism fsdp --meta-init --models qwen2.5-72b --samples 1 --no-compile
    # also through the worker's rank-0 control plane (ratchet_trainer/ranks.py, commands.py) in the same
    # job: load, steps, a sharded save and a reload from it, against the direct Trainer.step's time
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

ARCHS = {
    "qwen3-4b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 2560, "intermediate_size": 9728,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": True,
                 "rms_norm_eps": 1e-6},
    "qwen3-8b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
                 "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
                 "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                 "rms_norm_eps": 1e-6},
    "qwen3-14b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 5120, "intermediate_size": 17408,
                  "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
                  "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                  "rms_norm_eps": 1e-6},
    "qwen3-32b": {"model_type": "qwen3", "vocab_size": 151936, "hidden_size": 5120, "intermediate_size": 25600,
                  "num_hidden_layers": 64, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                  "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
                  "rms_norm_eps": 1e-6},
    # 70B class: Qwen3 has no dense model past 32B; Qwen2.5-72B's published config (q/k/v biases).
    "qwen2.5-72b": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 29568,
                    "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                    "rope_theta": 1_000_000.0, "max_position_embeddings": 32768, "tie_word_embeddings": False,
                    "rms_norm_eps": 1e-6},
    # Past 70B, for the largest LoRA that trains on 4 GPUs: Qwen1.5-110B's shape (dense, 80 layers, hidden 8192,
    # MLP 49152, 64 heads over 8 KV heads, q/k/v biases), 111 B parameters.
    "qwen1.5-110b": {"model_type": "qwen2", "vocab_size": 152064, "hidden_size": 8192, "intermediate_size": 49152,
                     "num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
                     "rope_theta": 1_000_000.0, "max_position_embeddings": 32768, "tie_word_embeddings": False,
                     "rms_norm_eps": 1e-6},
}
TINY = {**ARCHS["qwen3-8b"], "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12}  # dense bf16 datasheet, SXM


def materialise(model, device, seed: int) -> None:
    """A meta-built, already sharded model made real on `device`: each rank's own shards drawn at random
    (normal 0.02; norms 1, biases and LoRA B 0, as a fresh model has them), RoPE's buffers recomputed.
    Not a single process's weights (each rank draws its own): for throughput and memory, not for equality."""
    import torch

    # Swap, not replace: the optimiser already holds these parameter objects (plain ones, like the
    # unsharded head, would otherwise come back as new Parameters).
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:
        model.to_empty(device=device)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    g = torch.Generator(device=device).manual_seed(1000 + seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = p.to_local() if hasattr(p, "to_local") else p
            if "norm" in name:
                t.fill_(1.0)
            elif name.endswith("bias") or "lora_B" in name:
                t.zero_()
            else:
                t.normal_(0.0, 0.02, generator=g)
        for mod in model.modules():
            if type(mod).__name__.endswith("RotaryEmbedding"):
                fresh = type(mod)(config=mod.config)
                for bname, buf in fresh.named_buffers(recurse=False):
                    getattr(mod, bname).copy_(buf)


def rank_main(args) -> None:
    import torch
    import torch.distributed as dist

    from bench_train import flops_per_step, make_batch
    from ratchet_trainer.core.config import parse_trainer_config
    from ratchet_trainer.core.trainer import Trainer

    cuda = torch.cuda.is_available() and not args.tiny
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    conf = TINY if args.tiny else ARCHS[args.model]
    lora = args.method == "lora"
    rec = {"model": "tiny" if args.tiny else args.model, "gpus": world, "method": args.method, "seq_len": args.seq,
           "lora_rank": args.rank if lora else None, "ac": bool(int(args.ac)), "samples_per_gpu": args.samples}
    try:
        cfg = parse_trainer_config({
            "model": {"config": conf, "compile": False if args.no_compile else "auto"},
            "mode": args.method, "lora": {"rank": args.rank, "alpha": 2 * args.rank, "dropout": 0.0},
            "ac": {"freq": int(args.ac)}, "optim": {"lr": 1e-5, "weight_decay": 0.0}, "seq_len": args.seq,
            "micro_batch_tokens": max(4096, args.seq), "packing": False, "device": "cuda" if cuda else "cpu",
            "parallelism": args.parallelism,
        })
        t0 = time.perf_counter()
        model = None
        if args.meta_init:
            if args.parallelism != "fsdp":
                raise SystemExit("--meta-init builds a sharded model. Fix: pass --parallelism fsdp with it")
            from ratchet_trainer.core.model import build_model, resolve_attn_implementation, resolve_dtype

            dev = torch.device("cuda", local) if cuda else torch.device("cpu")
            model = build_model(cfg, torch.device("meta"), resolve_attn_implementation(cfg, dev, False),
                                dtype=resolve_dtype(cfg, dev))
        trainer = Trainer("bench", cfg, model=model)
        if args.meta_init:
            before = [id(p) for p in trainer.params]
            materialise(trainer.model, torch.device("cuda", local) if cuda else torch.device("cpu"), rank)
            # The optimiser was built over these parameter objects: to_empty must have kept them.
            if before != [id(p) for p in trainer.model.parameters() if p.requires_grad]:
                raise RuntimeError("to_empty replaced the trainable parameters; the optimiser holds the old ones")
        rec.update(build_s=time.perf_counter() - t0, parallelism=trainer.parallelism, compile=trainer.compiled,
                   meta_init=bool(args.meta_init))
        if cuda:
            build_peak = torch.tensor([torch.cuda.max_memory_allocated(local) / 2**30], device="cuda")
            dist.all_reduce(build_peak, op=dist.ReduceOp.MAX)
            rec["build_peak_gib_max_rank"] = float(build_peak[0])
            torch.cuda.reset_peak_memory_stats(local)
        samples = args.samples * world
        batch = make_batch(samples, args.seq, conf["vocab_size"], torch.Generator().manual_seed(0))
        times = []
        for s in range(args.steps + 1):  # the first is warm-up
            if cuda:
                torch.cuda.synchronize()
            dist.barrier()
            t = time.perf_counter()
            m = trainer.step(s, batch)
            if cuda:
                torch.cuda.synchronize()
            if s:
                times.append(time.perf_counter() - t)
        dt = sorted(times)[len(times) // 2]
        base = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
        n_embed = conf["vocab_size"] * conf["hidden_size"]
        # Whole-model counts: sharded parameters report their global shape.
        n_all = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n)
        n_lora = sum(p.numel() for p in trainer.params)
        tokens = samples * args.seq
        flops = flops_per_step(conf, n_all - n_embed, n_lora if lora else 0, tokens, args.seq, lora)
        gpu = torch.cuda.get_device_name(local) if cuda else "cpu"
        peak_flops = next((v for k, v in PEAK_BF16.items() if k in gpu), 989e12)
        mem = torch.tensor([torch.cuda.max_memory_allocated(local) / 2**30 if cuda else 0.0,
                            torch.cuda.max_memory_reserved(local) / 2**30 if cuda else 0.0],
                           device="cuda" if cuda else "cpu")
        dist.all_reduce(mem, op=dist.ReduceOp.MAX)
        rec.update(status="ok", gpu=gpu, params=n_all, step_s=dt, step_times_s=times, tokens_per_step=tokens,
                   tokens_per_s=tokens / dt, mfu=flops / dt / (peak_flops * world), peak_gib_max_rank=float(mem[0]),
                   peak_reserved_gib_max_rank=float(mem[1]),
                   loss=m["loss"], micro_batches=m["micro_batches"])
    except Exception as e:  # an OOM or a failed kernel is a result too
        rec.update(status="oom" if "out of memory" in str(e).lower() else "error",
                   error=f"{type(e).__name__}: {str(e).splitlines()[0][:400]}")
        print(json.dumps(rec), file=sys.stderr, flush=True)
    if args.via_worker and rec.get("status") == "ok":
        del trainer
        if cuda:
            torch.cuda.empty_cache()
        try:
            rec["via_worker"] = via_worker(args, cfg, batch, cuda)
        except Exception as e:  # noqa: BLE001 - recorded, like an OOM
            rec["via_worker"] = {"status": "error", "error": f"{type(e).__name__}: {str(e).splitlines()[0][:400]}"}
    if rank == 0:
        Path(args.result).write_text(json.dumps(rec))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def via_worker(args, cfg, batch, cuda: bool) -> dict | None:
    """The same steps through the trainer worker's commands: rank 0 leads (as the Temporal worker does,
    without Temporal), the other ranks follow. Returns rank 0's timings (None on the others)."""
    import torch
    import torch.distributed as dist

    from ratchet_trainer.commands import TrainerCommands, follow
    from ratchet_trainer.core.batch import write_batch
    from ratchet_trainer.ranks import Ranks

    ranks = Ranks()  # the default group exists (NCCL/gloo above): adds the gloo control group
    root = Path(args.result).with_suffix(".worker")  # this job's own: every rank gets the same --result
    cmds = TrainerCommands(root / "artifacts", f"rank {ranks.rank}", ranks)
    if not ranks.leader:
        follow(ranks, cmds)
        dist.barrier()
        return None
    starts = batch.sample_offsets.tolist()
    samples = [{"input_ids": batch.input_ids[a:b].tolist(), "loss_mask": batch.loss_mask[a:b].tolist(),
                "advantage": float(batch.advantages[a:b][batch.loss_mask[a:b].bool()][0]),
                "inference_logprobs": batch.inference_logprobs[a:b].tolist()} for a, b in zip(starts, starts[1:])]
    refs = write_batch(root, "batch", samples, {"run_id": "bench", "vocab_size": batch.manifest["vocab_size"], "seq_len": cfg.seq_len})

    def timed(fn):
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        out = fn()
        if cuda:
            torch.cuda.synchronize()
        return out, time.perf_counter() - t

    load_req = {"run_id": "bench", "trainer_config": cfg.to_dict(), "checkpoint": None}
    try:
        _, build_s = timed(lambda: cmds.load(load_req))
        times, m = [], None
        for s in range(args.steps + 1):  # the first is warm-up
            (m, _), dt = timed(lambda: cmds.step({"run_id": "bench", "step": s, "batch": refs[0], "manifest": refs[1]}))
            if s:
                times.append(dt)
        saved, save_s = timed(lambda: cmds.save({"run_id": "bench", "step": args.steps}))
        _, reload_s = timed(lambda: cmds.load({**load_req, "checkpoint": saved["checkpoint"]}))
        (after, _), step_after_s = timed(lambda: cmds.step({"run_id": "bench", "step": args.steps + 1, "batch": refs[0], "manifest": refs[1]}))
    finally:
        cmds.stop_followers()
    dist.barrier()
    return {"status": "ok", "build_s": build_s, "step_s": sorted(times)[len(times) // 2], "step_times_s": times,
            "loss": m["loss"], "save_s": save_s, "reload_s": reload_s, "step_after_reload_s": step_after_s,
            "loss_after_reload": after["loss"], "checkpoint": saved["checkpoint"]["uri"]}


def driver(args) -> None:
    import torch

    gpus = [int(g) for g in args.gpus.split(",")]
    acs = [a for a in args.ac.split(",")]
    models = ["tiny"] if args.tiny else args.models.split(",")
    if not args.tiny and max(gpus) > torch.cuda.device_count():
        raise SystemExit(f"--gpus asks for {max(gpus)} GPUs and this machine has {torch.cuda.device_count()}. "
                         "Fix: pass --gpus up to the GPU count")
    out = Path(args.out)
    results = {"argv": sys.argv, "torch": torch.__version__, "runs": []}
    for model, ac, n in [(m, a, n) for m in models for a in acs for n in gpus]:
        if n == 1 and model != models[0] and args.scaling_model_only:
            continue
        res = out.with_suffix(f".{model}.ac{ac}.{n}.json")
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}",
               str(Path(__file__).resolve()), "--rank-mode", "--result", str(res), "--model", model,
               "--seq", str(args.seq), "--samples", str(args.samples), "--steps", str(args.steps),
               "--rank", str(args.rank), "--ac", ac, "--method", args.method, "--parallelism", args.parallelism] + \
              (["--tiny"] if args.tiny else []) + (["--no-compile"] if args.no_compile else []) + \
              (["--via-worker"] if args.via_worker else []) + (["--meta-init"] if args.meta_init else [])
        print("$", " ".join(cmd), flush=True)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, timeout=args.timeout, capture_output=True, text=True)
            rec = json.loads(res.read_text()) if res.exists() else {
                "model": model, "gpus": n, "ac": bool(int(ac)), "status": "crashed", "error": proc.stderr[-1500:]}
        except subprocess.TimeoutExpired:
            rec = {"model": model, "gpus": n, "ac": bool(int(ac)), "status": "timeout", "error": f"over {args.timeout}s"}
        rec["wall_s"] = time.perf_counter() - t0
        results["runs"].append(rec)
        print(json.dumps(rec), flush=True)
        out.write_text(json.dumps(results, indent=1))
    # Weak scaling against the 1-GPU run of the same model and checkpointing.
    base = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    if base is not None:
        results["baseline"] = {"file": args.baseline, "gpu": base.get("gpu"), "argv": base.get("argv")}
    for r in results["runs"]:
        one = next((b for b in results["runs"] if b["model"] == r["model"] and b["gpus"] == 1
                    and b.get("ac") == r.get("ac") and b.get("status") == "ok"), None)
        if r.get("status") == "ok" and one:
            r["scaling_efficiency"] = r["tokens_per_s"] / (r["gpus"] * one["tokens_per_s"])
        ref = next((b for b in (base or {}).get("runs", []) if b.get("status") == "ok" and b["seq_len"] == r.get("seq_len")
                    and b["ac"] == r.get("ac") and b["method"] == r.get("method")
                    and (b.get("rank") == r.get("lora_rank") or r.get("method") == "full")), None)
        if r.get("status") == "ok" and ref:
            r["baseline_tokens_per_s"] = ref["tokens_per_s"]
            r["speedup_vs_baseline"] = r["tokens_per_s"] / ref["tokens_per_s"]
    out.write_text(json.dumps(results, indent=1))
    print(f"\n{'model':10} {'par':9} {'ac':>2} {'gpus':>4} {'status':7} {'step s':>7} {'tok/s':>8} {'MFU/GPU':>7} "
          f"{'peak GiB':>8} {'scaling':>7} {'vs 1-proc':>9}")
    for r in results["runs"]:
        if r.get("status") == "ok":
            eff = f"{r['scaling_efficiency']:.0%}" if "scaling_efficiency" in r else "-"
            sp = f"{r['speedup_vs_baseline']:.2f}x" if "speedup_vs_baseline" in r else "-"
            print(f"{r['model']:10} {r['parallelism']:9} {int(r['ac']):2} {r['gpus']:4} {'ok':7} {r['step_s']:7.2f} "
                  f"{r['tokens_per_s']:8.0f} {r['mfu']:7.1%} {r['peak_gib_max_rank']:8.1f} {eff:>7} {sp:>9}")
        else:
            print(f"{r['model']:10} {'':9} {int(r.get('ac', 0)):2} {r['gpus']:4} {r['status']:7} {r.get('error', '')[:150]}")
        w = r.get("via_worker")
        if w:
            print(f"  via the worker's ranks: {json.dumps({k: v for k, v in w.items() if k != 'step_times_s'})}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="dist.json")
    ap.add_argument("--gpus", default="1,2")
    ap.add_argument("--models", default="qwen3-8b")
    ap.add_argument("--scaling-model-only", action="store_true",
                    help="run 1 GPU only for the first model (the others are tried for fit on the largest count)")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--samples", type=int, default=4, help="samples per GPU (weak scaling)")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--ac", default="1", help="checkpointing, one job each: 1, 0 or 1,0")
    ap.add_argument("--method", choices=("lora", "full"), default="lora")
    ap.add_argument("--parallelism", choices=("auto", "replicate", "fsdp"), default="auto")
    ap.add_argument("--no-compile", action="store_true", help="eager decoder layers (default: compiled on CUDA)")
    ap.add_argument("--baseline", help="bench_train.py's JSON: each run's tokens/s over its single-process figure")
    ap.add_argument("--timeout", type=int, default=600)
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--via-worker", action="store_true", help="also time the steps through the worker's rank-0 control plane")
    ap.add_argument("--meta-init", action="store_true",
                    help="FSDP2: build on the meta device, shard, then draw each rank's shards (never a whole copy on a GPU)")
    ap.add_argument("--rank-mode", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    rank_main(args) if args.rank_mode else driver(args)


if __name__ == "__main__":
    main()
