"""Correctness on the GPU of what the CPU tests cannot run (FlexAttention has no CPU backward).

Small Qwen3 (4 layers, random init), LoRA r=16, one step on the same mixed-length
batch in each configuration; the loss and the adapter gradients must agree with the padded SDPA reference:
- packed + FlexAttention (document mask) vs padded + SDPA, fp32 (tight) and bf16;
- chunked logprobs vs full logits, bf16;
- a kernel option this GPU cannot run fails with ConfigError before any model is built.

RL-shaped batches (rl_batches.py: split trajectories, dropped rollouts, long-tailed lengths),
the training path against the fp32 eager reference (padded rows, SDPA, full logits):
- fp32 packed FlexAttention vs the reference: logprobs and gradients (layout only);
- bf16 + packing + FlexAttention + chunked logprobs, eager and compiled, vs the reference:
  per-token logprobs (mean and max |delta|), loss, adapter gradients (relative L2 error);
- compiled vs eager, both bf16 (what compile alone changes);
- compiled over 6 RL batches of different lengths: no recompile-limit hit, few graphs.
Tolerances (TOL below) are documented in BENCHMARKS.md with the values measured.
Every configuration starts from a fresh dynamo cache (torch._dynamo.reset()): several
configurations in one process would otherwise pile recompiles onto one code object.

  PYTHONPATH=trainer python3 trainer/bench/gpu_checks.py --out $OUT/checks.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_train import make_batch  # noqa: E402
from rl_batches import make_rl_batch  # noqa: E402
from ratchet_trainer.core import model as model_mod  # noqa: E402
from ratchet_trainer.core import trainer as trainer_mod  # noqa: E402
from ratchet_trainer.core.batch import batch_from_tensors  # noqa: E402
from ratchet_trainer.core.config import ConfigError, parse_trainer_config  # noqa: E402
from ratchet_trainer.core.trainer import Trainer  # noqa: E402

# bf16 training path vs fp32 eager reference; compiled vs eager (both bf16); fp32 layouts.
TOL = {"bf16_vs_fp32": {"lp_mean": 0.01, "lp_max": 0.125, "loss_rel": 1e-2, "grad_rel": 0.05},
       "compile_vs_eager_bf16": {"lp_mean": 0.01, "lp_max": 0.125, "loss_rel": 1e-2, "grad_rel": 0.05},
       "fp32_layout": {"lp_mean": 1e-5, "lp_max": 1e-4, "loss_rel": 1e-4, "grad_rel": 1e-4}}

SMALL = {"model_type": "qwen3", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}


def step(dtype: str, packing: bool, attn: str, chunk: int, lengths: list[int], compile_: bool = False) -> tuple[dict, dict]:
    torch._dynamo.reset()
    cfg = parse_trainer_config({
        "model": {"config": SMALL, "dtype": dtype, "attn_implementation": attn, "compile": compile_},
        "lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
        "optim": {"lr": 1e-3, "max_grad_norm": 0.0}, "seq_len": 2048, "micro_batch_tokens": 2048, "packing": packing,
        "logprob_chunk_tokens": chunk, "device": "cuda", "seed": 0,
    })
    tr = Trainer("bench", cfg)  # make_batch writes run_id "bench"
    batch = make_batch(len(lengths), max(lengths), SMALL["vocab_size"], torch.Generator().manual_seed(1), lengths)
    grads: dict[int, torch.Tensor] = {}

    def snap(opt, *_):  # the summed gradient the optimiser is about to apply
        for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
            grads[i] = p.grad.detach().float().cpu().clone()

    tr.optimizer.register_step_pre_hook(snap)
    m = tr.step(0, batch)
    return m, grads


def compare(name: str, ref, got, rtol: float) -> dict:
    (mr, sr), (mg, sg) = ref, got
    # Whole-gradient relative error: |g - g_ref| / |g_ref| over all adapter gradients.
    num = sum(float((sr[k] - sg[k]).pow(2).sum()) for k in sr) ** 0.5
    worst = num / (sum(float(sr[k].pow(2).sum()) for k in sr) ** 0.5)
    rec = {"check": name, "loss_ref": mr["loss"], "loss": mg["loss"], "grad_norm_ref": mr["grad_norm"],
           "grad_norm": mg["grad_norm"], "grad_rel_err": worst,
           "loss_rel_diff": abs(mr["loss"] - mg["loss"]) / (abs(mr["loss"]) + 1e-12),
           "grad_norm_rel_diff": abs(mr["grad_norm"] - mg["grad_norm"]) / mr["grad_norm"]}
    rec["ok"] = rec["loss_rel_diff"] < rtol and rec["grad_norm_rel_diff"] < rtol and worst < rtol
    print(json.dumps(rec), flush=True)
    return rec


def rl_batch(step_: int, seq: int = 2048):
    """An RL-shaped batch for the small model, as the trainer loads it (write_batch's tensors)."""
    import tempfile

    from ratchet_trainer.core.batch import write_batch

    samples, manifest = make_rl_batch(step_, seq=seq, vocab=SMALL["vocab_size"], seed=7, run_id="check")
    manifest["step"] = 0
    d = Path(tempfile.mkdtemp())
    write_batch(d, "b", samples, manifest)
    from safetensors.torch import load_file

    return batch_from_tensors(load_file(str(d / "b.safetensors")), json.loads((d / "b.json").read_text()))


def rl_base(device: str = "cuda") -> torch.nn.Module:
    """The fp32 model with its LoRA adapter that every configuration starts from: random init
    draws different numbers in bf16 than in fp32, so a bf16 model is this one cast, never rebuilt."""
    from ratchet_trainer.core.model import build_model

    cfg = parse_trainer_config({"model": {"config": SMALL, "dtype": "float32", "lora": {"rank": 16, "alpha": 32}},
                                "device": device, "seed": 0})
    m = build_model(cfg, torch.device(device), "sdpa")
    # B starts at 0 (no gradient to A then): give it values so both adapter matrices are checked.
    with torch.no_grad():
        g = torch.Generator(device=device).manual_seed(3)
        for n, p in m.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g, device=device) * 0.02)
    return m


def rl_step(batch, base, dtype: str, packing: bool, attn: str, chunk: int, compile_: bool) -> dict:
    """One Trainer.step on `batch`; returns metrics, adapter gradients and the per-token logprobs
    the loss saw, keyed by (sample, position) so that layouts compare token by token."""
    import copy

    torch._dynamo.reset()
    model = copy.deepcopy(base)
    for p in model.parameters():
        if not p.requires_grad:  # the frozen base in the compute dtype; the adapter stays fp32 (masters)
            p.data = p.data.to(getattr(torch, dtype))
    cfg = parse_trainer_config({
        "model": {"config": SMALL, "dtype": dtype, "attn_implementation": attn, "compile": compile_,
                  "lora": {"rank": 16, "alpha": 32, "dropout": 0.0}},
        "optim": {"lr": 1e-3, "max_grad_norm": 0.0}, "seq_len": 2048, "micro_batch_tokens": 4096, "packing": packing,
        "logprob_chunk_tokens": chunk, "device": "cuda", "seed": 0,
    })
    tr = Trainer("check", cfg, model=model)
    grads: dict[int, torch.Tensor] = {}

    def snap(opt, *_):
        for i, p in enumerate(p for g in opt.param_groups for p in g["params"]):
            grads[i] = p.grad.detach().float().cpu().clone()

    tr.optimizer.register_step_pre_hook(snap)
    lps: dict[tuple[int, int], float] = {}
    orig = trainer_mod.micro_batch_loss
    orig_tlp = trainer_mod.micro_batch_loss.__globals__["token_logprobs"]
    cur = {}

    def tlp(out, input_ids, sel, temperature=1.0):
        lp, ent = orig_tlp(out, input_ids, sel, temperature)
        mb = cur["mb"]
        s_idx = mb.sample_index[:, 1:][sel].tolist()
        pos = mb.position_ids[:, 1:][sel].tolist()
        for a, b, v in zip(s_idx, pos, lp.detach().float().tolist()):
            lps[(a, b)] = v
        return lp, ent

    def mbl(out, mb, *a, **k):
        cur["mb"] = mb
        return orig(out, mb, *a, **k)

    trainer_mod.micro_batch_loss = mbl
    orig.__globals__["token_logprobs"] = tlp
    try:
        m = tr.step(0, batch)
    finally:
        trainer_mod.micro_batch_loss = orig
        orig.__globals__["token_logprobs"] = orig_tlp
    return {"m": m, "grads": grads, "lps": lps, "stats": model_mod.compile_stats()}


def rl_compare(name: str, ref: dict, got: dict, tol: dict) -> dict:
    keys = sorted(ref["lps"])
    missing = len(set(keys) ^ set(got["lps"]))
    d = torch.tensor([abs(ref["lps"][k] - got["lps"].get(k, float("nan"))) for k in keys])
    sr, sg = ref["grads"], got["grads"]
    num = sum(float((sr[k] - sg[k]).pow(2).sum()) for k in sr) ** 0.5
    grad_rel = num / (sum(float(sr[k].pow(2).sum()) for k in sr) ** 0.5)
    loss_rel = abs(ref["m"]["loss"] - got["m"]["loss"]) / (abs(ref["m"]["loss"]) + 1e-12)
    rec = {"check": name, "tokens": len(keys), "tokens_missing": missing, "lp_mean_abs_diff": float(d.mean()),
           "lp_max_abs_diff": float(d.max()), "loss_ref": ref["m"]["loss"], "loss": got["m"]["loss"], "loss_rel_diff": loss_rel,
           "grad_norm_ref": ref["m"]["grad_norm"], "grad_norm": got["m"]["grad_norm"], "grad_rel_err": grad_rel,
           "tolerance": tol, "compile_stats": got.get("stats")}
    rec["ok"] = (missing == 0 and bool(torch.isfinite(d).all()) and rec["lp_mean_abs_diff"] < tol["lp_mean"]
                 and rec["lp_max_abs_diff"] < tol["lp_max"] and loss_rel < tol["loss_rel"] and grad_rel < tol["grad_rel"])
    print(json.dumps(rec), flush=True)
    return rec


def rl_checks(out: dict, save=lambda: None) -> None:
    batch = rl_batch(0)
    base = rl_base()
    out["rl_batch"] = {"samples": batch.num_samples, "trajectories": int(batch.trajectories().max()) + 1,
                       "lengths": batch.sample_lengths(), "dropped": batch.manifest["dropped"]}
    ref = rl_step(batch, base, "float32", False, "sdpa", 0, False)
    comp16 = rl_step(batch, base, "bfloat16", True, "flex_attention", 1024, True)
    out["checks"].append(rl_compare("RL batch: bf16 packed flex chunked, COMPILED vs fp32 eager reference", ref, comp16,
                                    TOL["bf16_vs_fp32"]))
    save()
    eager16 = rl_step(batch, base, "bfloat16", True, "flex_attention", 1024, False)
    out["checks"].append(rl_compare("RL batch: bf16 packed flex chunked, eager vs fp32 eager reference", ref, eager16,
                                    TOL["bf16_vs_fp32"]))
    out["checks"].append(rl_compare("RL batch: bf16 compiled vs bf16 eager (same path)", eager16, comp16,
                                    TOL["compile_vs_eager_bf16"]))
    save()
    out["checks"].append(rl_compare("RL batch, fp32: packed flex vs padded sdpa (eager)", ref,
                                    rl_step(batch, base, "float32", True, "flex_attention", 0, False), TOL["fp32_layout"]))
    save()
    # Recompiles over RL batches of varying lengths, through one compiled trainer.
    torch._dynamo.reset()
    limit0 = model_mod.COMPILE_WATCH.limit_hits
    cfg = parse_trainer_config({"model": {"config": SMALL, "compile": True, "lora": {"rank": 16, "alpha": 32}},
                                "optim": {"lr": 1e-4}, "seq_len": 2048, "micro_batch_tokens": 4096, "device": "cuda"})
    tr = Trainer("check", cfg)
    graphs = []
    for k in range(6):
        b = rl_batch(k + 1)
        b.manifest["step"] = k
        m = tr.step(k, b)
        graphs.append(m.get("compile_graphs"))
    hits = model_mod.COMPILE_WATCH.limit_hits - limit0
    rec = {"check": "compiled trainer over 6 RL batches of varying lengths: no recompile-limit hit",
           "graphs_after_each_step": graphs, "limit_hits": hits, "limit_reason": model_mod.COMPILE_WATCH.last_reason,
           "ok": hits == 0}
    print(json.dumps(rec), flush=True)
    out["checks"].append(rec)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="checks.json")
    ap.add_argument("--only-rl", action="store_true")
    args = ap.parse_args()
    lengths = [700, 130, 1500, 333, 64, 980, 1200, 257]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "checks": [], "tolerances": TOL}
    rl_checks(out, lambda: Path(args.out).write_text(json.dumps(out, indent=1)))
    Path(args.out).write_text(json.dumps(out, indent=1))
    if args.only_rl:
        out["all_ok"] = all(c["ok"] for c in out["checks"])
        Path(args.out).write_text(json.dumps(out, indent=1))
        print("ALL OK" if out["all_ok"] else "SOME CHECKS FAILED", flush=True)
        return
    ref32 = step("float32", False, "sdpa", 0, lengths)
    out["checks"].append(compare("fp32: packed flex vs padded sdpa", ref32, step("float32", True, "flex_attention", 0, lengths), 1e-4))
    out["checks"].append(compare("fp32: packed sdpa vs padded sdpa", ref32, step("float32", True, "sdpa", 0, lengths), 1e-4))
    ref16 = step("bfloat16", False, "sdpa", 0, lengths)
    out["checks"].append(compare("bf16: packed flex vs padded sdpa", ref16, step("bfloat16", True, "flex_attention", 0, lengths), 5e-2))
    out["checks"].append(compare("bf16: chunked logprobs vs full logits", ref16, step("bfloat16", False, "sdpa", 256, lengths), 5e-2))
    try:
        Trainer("check", parse_trainer_config({"model": {"config": SMALL, "attn_implementation": "flash_attention_2"},
                                               "device": "cuda"}))
        rec = {"check": "flash_attention_2 without flash_attn", "ok": False, "error": None}
    except ConfigError as e:
        rec = {"check": "flash_attention_2 without flash_attn", "ok": "not installed" in str(e), "error": str(e)}
    print(json.dumps(rec), flush=True)
    out["checks"].append(rec)
    out["all_ok"] = all(c["ok"] for c in out["checks"])
    Path(args.out).write_text(json.dumps(out, indent=1))
    print("ALL OK" if out["all_ok"] else "SOME CHECKS FAILED", flush=True)


if __name__ == "__main__":
    main()
