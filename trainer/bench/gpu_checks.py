"""Correctness on the GPU of what the CPU tests cannot run (FlexAttention has no CPU backward).

Small Qwen3 (4 layers, random init), LoRA r=16, one step on the same mixed-length
batch in each configuration; the loss and the adapter gradients must agree with the padded SDPA reference:
- packed + FlexAttention (document mask) vs padded + SDPA, fp32 (tight) and bf16;
- chunked logprobs vs full logits, bf16;
- a kernel option this GPU cannot run fails with ConfigError before any model is built.

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
from ratchet_trainer.core.config import ConfigError, parse_trainer_config  # noqa: E402
from ratchet_trainer.core.trainer import Trainer  # noqa: E402

SMALL = {"model_type": "qwen3", "vocab_size": 4096, "hidden_size": 256, "intermediate_size": 512,
         "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
         "max_position_embeddings": 4096, "tie_word_embeddings": False}


def step(dtype: str, packing: bool, attn: str, chunk: int, lengths: list[int]) -> tuple[dict, dict]:
    cfg = parse_trainer_config({
        "model": {"config": SMALL, "dtype": dtype, "attn_implementation": attn},
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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="checks.json")
    args = ap.parse_args()
    lengths = [700, 130, 1500, 333, 64, 980, 1200, 257]
    out = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "checks": []}
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
