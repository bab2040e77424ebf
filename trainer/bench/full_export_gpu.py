"""Full fine-tuning's model/ export on a GPU (issue 41): one step of trainer.mode = "full" on CUDA (bf16, the
config's default there), save_checkpoint, then model/ read back with transformers as vLLM's loader would take
it: every key, none missing or unexpected, the architecture and tie the config names, and each tensor exactly
the trainer's. Then the reloaded model's logprobs on the batch against the trainer's (same GPU, same dtype).

Models are random Qwen3s written with save_pretrained first, so the trainer takes the model.path route a real
run takes. Under torchrun (one process a GPU) the trainer's process group is NCCL.

  PYTHONPATH=trainer python3 trainer/bench/full_export_gpu.py --models tiny-tied,tiny-untied --out r.json
  PYTHONPATH=trainer torchrun --nproc-per-node 1 trainer/bench/full_export_gpu.py --models tiny-tied --out r.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from helpers import make_cfg, make_samples  # noqa: E402
from ratchet_trainer.core import Trainer, save_checkpoint, write_batch  # noqa: E402
from ratchet_trainer.core.artifacts import uri_to_path  # noqa: E402
from ratchet_trainer.core.batch import load_batch  # noqa: E402
from ratchet_trainer.core.distributed import local_tensor, world  # noqa: E402

SHAPES = {
    # tiny: exactness on every tensor, tied and untied; qwen3-0.6b / qwen3-4b: Qwen3's own shapes (both tied)
    "tiny-tied": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, head_dim=16, tie_word_embeddings=True),
    "tiny-untied": dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, head_dim=16, tie_word_embeddings=False),
    "qwen3-0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-4b": dict(vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
}


def write_model(name: str, d: Path, device: str) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    if world()[0] == 0 and not (d / "config.json").is_file():
        torch.manual_seed(1)
        conf = Qwen3Config(max_position_embeddings=4096, **SHAPES[name])
        with torch.device(device):
            model = Qwen3ForCausalLM(conf).to(torch.bfloat16)
        model.save_pretrained(str(d))
        del model
    if world()[1] > 1:
        dist.barrier()


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def one(name: str, work: Path, device: str) -> dict:
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    d = work / "models" / name
    write_model(name, d, device)
    # Padded rows: the export is the subject; packing's FlexAttention would add its compile to the lease.
    cfg = make_cfg("tiny", mode="full", device=device, packing=False, model={"path": str(d), "config": None},
                   optim={"lr": 1e-3, "weight_decay": 0.0}, seq_len=256, micro_batch_tokens=1024)
    tr = Trainer("run", cfg)
    vocab = tr.vocab_size
    refs = write_batch(work / f"batch-{name}", "b", make_samples(vocab, lengths=(64, 80, 48, 72)),
                       {"run_id": "run", "step": 0, "vocab_size": vocab})
    sync(device)
    t0 = time.perf_counter()
    metrics = tr.step(0, load_batch(*refs))
    sync(device)
    t_step = time.perf_counter() - t0
    t0 = time.perf_counter()
    refs_ck = save_checkpoint(tr, work / f"art-{name}", 0)
    t_save = time.perf_counter() - t0
    res: dict = {"model": name, "parallelism": tr.parallelism, "world_size": world()[1],
                 "params": sum(p.numel() for p in tr.model.parameters()), "loss": metrics["loss"],
                 "step_s": round(t_step, 3), "save_s": round(t_save, 3)}
    if world()[0] != 0:
        return res
    model_dir = uri_to_path(refs_ck["weights"]["uri"])
    conf = json.loads((model_dir / "config.json").read_text())
    with safe_open(str(model_dir / "model.safetensors"), "pt") as f:
        file_keys = set(f.keys())
        file_dtypes = sorted({str(f.get_slice(k).get_dtype()) for k in file_keys})
    res.update(files=sorted(p.name for p in model_dir.iterdir()),
               model_bytes=(model_dir / "model.safetensors").stat().st_size,
               architectures=conf.get("architectures"), config_dtype=conf.get("dtype", conf.get("torch_dtype")),
               tie_word_embeddings=conf.get("tie_word_embeddings"), file_dtypes=file_dtypes, file_keys=len(file_keys))
    trained = {k: local_tensor(v.detach()) for k, v in tr.model.state_dict().items()}
    res["trained_dtypes"] = sorted({str(v.dtype) for v in trained.values()})
    t0 = time.perf_counter()
    served, info = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype="auto", output_loading_info=True)
    served.to(device)
    res["load_s"] = round(time.perf_counter() - t0, 3)
    res["served_class"] = type(served).__name__
    res["served_dtype"] = str(next(served.parameters()).dtype)
    res["missing_keys"] = sorted(info["missing_keys"])
    res["unexpected_keys"] = sorted(info["unexpected_keys"])
    res["served_head_is_embedding"] = served.lm_head.weight is served.model.embed_tokens.weight
    sd = served.state_dict()
    res["keys_equal"] = sorted(sd) == sorted(trained)
    res["tensors_not_exact"] = [k for k in sorted(trained) if k not in sd or not torch.equal(sd[k], trained[k].to(sd[k].dtype))]
    res["max_abs_diff"] = max(float((sd[k].float() - trained[k].float()).abs().max()) for k in trained if k in sd)
    # What the served weights say about the batch, against the trainer's own logprobs after the step.
    batch = load_batch(*refs)
    want = tr.sample_logprobs(batch)
    worst = 0.0
    for s, lp in zip(make_samples(vocab, lengths=(64, 80, 48, 72)), want):
        ids = torch.tensor([s["input_ids"]], device=device)
        with torch.no_grad():
            logits = served(input_ids=ids).logits.float()
        got = torch.log_softmax(logits[0, :-1], -1).gather(-1, ids[0, 1:, None])[:, 0].cpu()
        worst = max(worst, float((got - lp[1:].float().cpu()).abs().max()))
    res["logprob_max_abs_diff_vs_trainer"] = worst
    res["ok"] = (not res["missing_keys"] and not res["unexpected_keys"] and res["keys_equal"] and not res["tensors_not_exact"]
                 and res["architectures"] == ["Qwen3ForCausalLM"] and res["served_class"] == "Qwen3ForCausalLM"
                 and res["served_head_is_embedding"] is bool(SHAPES[name]["tie_word_embeddings"]))
    del served
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="tiny-tied,tiny-untied")
    ap.add_argument("--work", default="/tmp/full-export")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    if "RANK" in os.environ:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl")
    launch = "torchrun" if "RANK" in os.environ else "python"
    out = {"launch": launch, "device": torch.cuda.get_device_name(0) if a.device == "cuda" else "cpu", "torch": torch.__version__,
           "transformers": __import__("transformers").__version__, "results": []}
    for name in a.models.split(","):
        try:
            r = one(name, Path(a.work) / launch, a.device)
        except Exception as e:  # noqa: BLE001 - one model's failure is a result; the others still run
            r = {"model": name, "ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}
        if a.device == "cuda":
            torch.cuda.empty_cache()
        out["results"].append(r)
        if world()[0] == 0:
            brief = {k: v for k, v in r.items() if k != "tensors_not_exact"}
            print(json.dumps(brief | {"not_exact": len(r.get("tensors_not_exact", []))}), flush=True)
            Path(a.out).write_text(json.dumps(out, indent=1))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
