"""GPU benchmark of the training core: Qwen3-8B architecture, random init.

Imports only the core (no Temporal). One base model is built once and reused:
each LoRA configuration wraps it in a fresh adapter and unwraps it after; full
fine-tuning runs last because it unfreezes and updates the base.

Usage (on the GPU box):
  PYTHONPATH=trainer python3 trainer/bench/bench_train.py --out $OUT/bench.json
  python3 trainer/bench/bench_train.py --ladder --seqs 4096 --out $OUT/ladder.json   # each change vs the previous
  python3 trainer/bench/bench_train.py --packing --out $OUT/packing.json   # padded / packed sdpa / packed flex
  python3 trainer/bench/bench_train.py --logprob-memory --seqs 8192 --out $OUT/lp.json
  python3 trainer/bench/bench_train.py --tiny --ladder  # CPU smoke test of the script itself

Runs use the trainer's current defaults (bf16 LoRA with fp32 masters, chunked
logprobs, attention "auto") unless a mode compares them with BASELINE, the
pre-issue-15 settings (fp32 LoRA, full logits, SDPA), in the same run.

The main table uses equal-length samples in the padded layout (nothing to pad).
--packing measures what RL batches look like: sample lengths spread uniformly
over [seq/8, seq], trained once padded (one row per sample) and once packed
(samples concatenated into rows of <= micro_batch_tokens), same token budget;
tokens/s counts real tokens only.

MFU = model FLOPs / (wall time * peak bf16 dense FLOP/s). Model FLOPs per step:
  full: 6 * N * tokens                + attention
  LoRA: 4 * N * tokens + 6 * N_lora * tokens + attention
N = non-embedding parameters (lm_head included; the input embedding is a lookup).
A frozen base still needs the backward through activations (2N per token) but
not the weight gradients (another 2N), hence 4N for LoRA. Attention (no weights):
6 * layers * heads * head_dim * seq_len per token (fwd+bwd, causal halved).
Recomputation by activation checkpointing is not counted (it is overhead, not
model work), so checkpointed runs show a lower MFU for the same model work.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratchet_trainer.core.batch import batch_from_tensors  # noqa: E402
from ratchet_trainer.core.config import parse_trainer_config  # noqa: E402
from ratchet_trainer.core.logprobs import HeadInput, logprobs_from_hidden, logprobs_from_logits  # noqa: E402
from ratchet_trainer.core.model import (apply_activation_checkpointing, build_base, make_trainable,  # noqa: E402
                                        uncompile_layers)
from ratchet_trainer.core.trainer import Trainer  # noqa: E402

QWEN3_8B = {
    "model_type": "qwen3", "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
    "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
    "rope_theta": 1_000_000.0, "max_position_embeddings": 40960, "tie_word_embeddings": False,
    "rms_norm_eps": 1e-6,
}
TINY = {**QWEN3_8B, "vocab_size": 1024, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}
PEAK_BF16 = {"H100": 989e12, "H200": 989e12}  # dense bf16 datasheet, SXM

log = logging.getLogger("bench")


def make_batch(samples: int, seq: int, vocab: int, gen: torch.Generator, lengths: list[int] | None = None):
    lengths = lengths or [seq] * samples
    T = sum(lengths)
    ids = torch.randint(0, vocab, (T,), generator=gen, dtype=torch.int32)
    pos = torch.cat([torch.arange(n, dtype=torch.int32) for n in lengths])
    mask = torch.zeros(T, dtype=torch.uint8)
    adv = torch.zeros(T)
    off_list = [0]
    for i, n in enumerate(lengths):
        s = off_list[-1]
        mask[s + max(1, n // 8) : s + n] = 1  # a short prompt, the rest generated (trainable)
        adv[s : s + n] = -1.0 if i % 2 else 1.0  # half the samples rewarded, half penalised
        off_list.append(s + n)
    adv = adv * mask.float()
    lp = torch.where(mask.bool(), torch.tensor(-math.log(vocab)), torch.tensor(0.0)).float()
    off = torch.tensor(off_list, dtype=torch.int64)
    tensors = {"input_ids": ids, "position_ids": pos, "loss_mask": mask, "advantages": adv.float(),
               "inference_logprobs": lp, "sample_offsets": off}
    return batch_from_tensors(tensors, {"format": "ratchet.batch/v1", "run_id": "bench", "vocab_size": vocab})


def flops_per_step(model_conf: dict, n_nonembed: int, n_lora: int, tokens: int, seq: int, lora: bool) -> float:
    attn = 6 * model_conf["num_hidden_layers"] * model_conf["num_attention_heads"] * model_conf["head_dim"] * seq
    dense = (4 * n_nonembed + 6 * n_lora) if lora else 6 * n_nonembed
    return float((dense + attn) * tokens)


# Today's (pre-issue-15) settings, for baselines measured in the same run.
BASELINE = {"lora_dtype": "float32", "logprob_chunk_tokens": 0, "attn": "sdpa", "compile": False}
CURRENT = {"lora_dtype": "auto", "logprob_chunk_tokens": 1024, "attn": "auto", "compile": "auto"}


def run_one(base, model_conf, method: str, rank: int, seq: int, ac: bool, samples: int, steps: int,
            device, peak: float, gen, packing: bool = False, lengths: list[int] | None = None,
            micro_batch_tokens: int | None = None, opts: dict | None = None, label: str = "") -> dict:
    opts = {**CURRENT, **(opts or {})}
    lora = None if method == "full" else {"rank": rank, "alpha": 2 * rank, "dropout": 0.0}
    cfg = parse_trainer_config({
        "mode": "full" if lora is None else "lora", **({"lora": lora} if lora else {}), "ac": {"freq": 1 if ac else 0},
        "model": {"config": model_conf,
                  "lora_dtype": opts["lora_dtype"], "attn_implementation": opts["attn"], "compile": opts["compile"]},
        "optim": {"lr": 1e-5, "weight_decay": 0.0}, "seq_len": seq, "logprob_chunk_tokens": opts["logprob_chunk_tokens"],
        "micro_batch_tokens": micro_batch_tokens or max(4096, seq), "packing": packing,
    })
    lengths = lengths or [seq] * samples
    tokens = sum(lengths)
    rec = {"label": label, "method": method, "rank": rank if lora else None, "seq_len": seq, "ac": ac,
           "samples": samples, "tokens_per_step": tokens, "micro_batch_tokens": cfg.micro_batch_tokens,
           "layout": "packed" if packing else "padded", "opts": opts}
    torch.cuda.empty_cache() if device.type == "cuda" else None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model = None
    trainer = None
    trainer_compiled = False
    try:
        apply_activation_checkpointing(base, cfg.ac.freq)
        model = make_trainable(base, cfg)
        trainer = Trainer("bench", cfg, device=device, model=model)
        rec["attn"] = trainer.attn_implementation
        rec["compiled"] = trainer_compiled = trainer.compiled
        n_lora = sum(p.numel() for p in trainer.params) if lora else 0
        n_embed = base.get_input_embeddings().weight.numel()
        n_nonembed = sum(p.numel() for n, p in base.named_parameters() if "lora_" not in n) - n_embed
        batch = make_batch(samples, seq, model_conf["vocab_size"], gen, lengths)
        times = []
        for s in range(steps + 1):  # the first is warm-up
            if device.type == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            m = trainer.step(s, batch)
            if device.type == "cuda":
                torch.cuda.synchronize()
            if s > 0:
                times.append(time.perf_counter() - t0)
        dt = sorted(times)[len(times) // 2]
        # Attention FLOPs at each sample's own length (what the model must do), summed.
        fl = sum(flops_per_step(model_conf, n_nonembed, n_lora, n, n, lora is not None) for n in lengths)
        rec.update(status="ok", step_s=dt, step_times_s=times, tokens_per_s=tokens / dt,
                   micro_batches=m["micro_batches"], padding_frac=m["padding_frac"],
                   model_tflops_per_step=fl / 1e12, achieved_tflops=fl / dt / 1e12, mfu=fl / dt / peak,
                   trainable_params=sum(p.numel() for p in trainer.params), n_nonembed=n_nonembed,
                   loss=m["loss"], grad_norm=m["grad_norm"])
    except torch.cuda.OutOfMemoryError as e:
        rec.update(status="oom", error=str(e).splitlines()[0][:300])
    except Exception as e:  # a kernel that fails to compile or run is a result too, recorded
        log.exception("run failed")
        rec.update(status="error", error=f"{type(e).__name__}: {str(e)[:500]}")
    if device.type == "cuda":
        rec["peak_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
        rec["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    # Give the base model back clean for the next configuration.
    if trainer is not None:
        trainer.optimizer.state.clear()
        if trainer.master is not None:
            trainer.master.remove()
        del trainer
    if trainer_compiled:
        uncompile_layers(base)
        torch._dynamo.reset()
    if lora is not None and model is not None and hasattr(model, "unload"):
        model.unload()
    for p in base.parameters():
        p.grad = None
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


def logprob_memory(seq: int, hidden_size: int, vocab: int, device, chunk: int) -> list[dict]:
    """Peak memory and time of the logprob computation alone (projection, log-softmax, entropy,
    backward to the hidden states) for one row of `seq` tokens, 7/8 of them trainable:
    full logits (the pre-issue-15 path) vs chunked from hidden states."""
    g = torch.Generator(device=device).manual_seed(0)
    weight = (torch.randn(vocab, hidden_size, device=device, generator=g) * 0.02).to(torch.bfloat16)
    ids = torch.randint(0, vocab, (1, seq), device=device, generator=g)
    sel = torch.zeros(1, seq - 1, dtype=torch.bool, device=device)
    sel[:, seq // 8 :] = True
    out = []
    h0 = torch.randn(1, seq, hidden_size, device=device, generator=g).to(torch.bfloat16)
    for name in ("full_logits", "chunked"):
        hidden = h0.clone().requires_grad_(True)  # the same inputs for both paths
        times = []
        for rep in range(3):
            hidden.grad = None
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base_mem = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            if name == "full_logits":
                lp, ent = logprobs_from_logits(torch.nn.functional.linear(hidden, weight), ids, sel)
            else:
                lp, ent = logprobs_from_hidden(HeadInput(hidden, weight, chunk_tokens=chunk), ids, sel)
            lp.sum().backward()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
            peak = (torch.cuda.max_memory_allocated() - base_mem) / 2**30
        rec = {"path": name, "seq": seq, "vocab": vocab, "trainable_tokens": int(sel.sum()), "chunk_tokens": chunk,
               "peak_extra_gib": peak, "time_s": sorted(times[1:])[0], "logprob_sum": float(lp.sum()),
               "entropy_mean": float(ent.mean())}
        out.append(rec)
        print(json.dumps(rec), flush=True)
        del hidden, lp, ent
        torch.cuda.empty_cache()
    return out


def print_table(runs: list[dict]) -> None:
    print(f"\n{'label':34} {'layout':7} {'attn':14} {'seq':>5} {'tok/step':>8} {'step s':>7} {'tok/s':>8} {'MFU':>6} {'peak GiB':>8}")
    for r in runs:
        if r["status"] == "ok":
            print(f"{r['label']:34} {r['layout']:7} {r.get('attn', ''):14} {r['seq_len']:5} {r['tokens_per_step']:8} "
                  f"{r['step_s']:7.2f} {r['tokens_per_s']:8.0f} {r['mfu']:6.1%} {r.get('peak_allocated_gib', 0):8.1f}")
        else:
            print(f"{r['label']:34} {r['layout']:7} {r.get('attn', ''):14} {r['seq_len']:5} {r['status']} "
                  f"{r.get('error', '')[:120]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench.json")
    ap.add_argument("--tiny", action="store_true", help="a 2-layer model on CPU, to check the script")
    ap.add_argument("--seqs", default="1024,4096,8192")
    ap.add_argument("--methods", default="lora4,lora64,full")
    ap.add_argument("--ac", default="1,0")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--samples", type=int, default=4)
    ap.add_argument("--packing", action="store_true",
                    help="padded vs packed (SDPA) vs packed (FlexAttention) on mixed-length samples "
                         "(LoRA r=16, checkpointing on; --samples default 16)")
    ap.add_argument("--ladder", action="store_true",
                    help="LoRA r=16, seq 4k, no checkpointing: each issue-15 change on top of the previous")
    ap.add_argument("--logprob-memory", action="store_true", help="memory of the logprob computation at --seqs")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--layouts", default="padded,packed-sdpa,packed-flex", help="--packing: which layouts")
    ap.add_argument("--compile", action="store_true", help="--packing: torch.compile the decoder layers in every run")
    ap.add_argument("--micro-batch-tokens", type=int, default=0,
                    help="--packing: one token budget per micro-batch at every seq, as a run sets it "
                         "(default max(4096, seq): at 4k and 8k a padded micro-batch then holds one sample)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(name)s %(levelname)s %(message)s")

    device = torch.device("cpu" if args.tiny else "cuda")
    model_conf = TINY if args.tiny else QWEN3_8B
    gpu = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    peak = next((v for k, v in PEAK_BF16.items() if k in gpu), 989e12)
    results = {"gpu": gpu, "torch": torch.__version__, "peak_flops": peak, "model": model_conf, "argv": sys.argv,
               "runs": []}
    seqs = [int(s) for s in args.seqs.split(",")]

    if args.logprob_memory:
        results["mode"] = "logprob_memory"
        for seq in seqs:
            results["runs"] += logprob_memory(seq, model_conf["hidden_size"], model_conf["vocab_size"], device, 1024)
            Path(args.out).write_text(json.dumps(results, indent=1))
        return

    t0 = time.perf_counter()
    base_cfg = parse_trainer_config({"model": {"config": model_conf}, "mode": "full", "seq_len": 8192, "device": device.type})
    base = build_base(base_cfg, device, "sdpa")
    base.requires_grad_(False)
    build_s = time.perf_counter() - t0
    n_params = sum(p.numel() for p in base.parameters())
    print(f"built {n_params/1e9:.2f}B params on {gpu} in {build_s:.1f}s", flush=True)
    results.update(params=n_params, build_s=build_s)
    gen = torch.Generator().manual_seed(0)

    def record(rec: dict) -> None:
        results["runs"].append(rec)
        print(json.dumps(rec), flush=True)
        Path(args.out).write_text(json.dumps(results, indent=1))

    if args.ladder:
        results["mode"] = "ladder"
        seq = seqs[0]
        steps = [("baseline: fp32 LoRA, full logits", BASELINE),
                 ("+ chunked logprobs", {**BASELINE, "logprob_chunk_tokens": 1024}),
                 ("+ bf16 LoRA, fp32 masters", {**BASELINE, "logprob_chunk_tokens": 1024, "lora_dtype": "auto"}),
                 ("+ torch.compile (decoder layers)", {**CURRENT, "compile": True})]
        for label, opts in steps:
            record(run_one(base, model_conf, "lora", args.rank, seq, False, args.samples, args.steps, device, peak,
                           gen, opts=opts, label=label))
        print_table(results["runs"])
        return

    if args.packing:
        results["mode"] = "packing"
        samples = args.samples if args.samples != 4 else 16
        for seq in seqs:
            lg = torch.Generator().manual_seed(seq)
            lengths = torch.randint(max(2, seq // 8), seq + 1, (samples,), generator=lg).tolist()
            layouts = {"padded": (False, "sdpa"), "packed-sdpa": (True, "sdpa"), "packed-flex": (True, "flex_attention")}
            for label in args.layouts.split(","):
                packing, attn = layouts[label]
                record(run_one(base, model_conf, "lora", args.rank, seq, True, samples, args.steps, device, peak, gen,
                               packing=packing, lengths=lengths,
                               micro_batch_tokens=args.micro_batch_tokens or max(4096, seq),
                               opts={"attn": attn, "compile": args.compile},
                               label=label + (" +compile" if args.compile else "")))
        print_table(results["runs"])
        return

    acs = [a == "1" for a in args.ac.split(",")]
    methods = args.methods.split(",")
    for method in methods:  # full goes last: it changes the base
        kind, rank = ("full", 0) if method == "full" else ("lora", int(method[4:]))
        if kind == "full":
            base.requires_grad_(True)
        for ac in acs:
            for seq in seqs:
                record(run_one(base, model_conf, kind, rank, seq, ac, args.samples, args.steps, device, peak, gen,
                               label=method))
        if kind == "full":
            base.requires_grad_(False)
    print_table(results["runs"])


if __name__ == "__main__":
    main()
