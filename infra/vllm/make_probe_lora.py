"""A small random LoRA adapter (q_proj and v_proj, rank 8) for any Llama/Qwen-family model, from its
config.json alone: the model's weights are never loaded, so it takes a second for a 14B model as for
SmolLM2. `ratchet doctor` loads it into vLLM and unloads it, which proves runtime LoRA loading works
on a GPU layout before any run has written an adapter (infra/inference-gpu.sh makes it at set-up).

Run in the trainer venv:
    python infra/vllm/make_probe_lora.py --base .ratchet/models/Qwen3-8B --out .ratchet/models/probe-lora-Qwen3-8B
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, type=Path, help="Hugging Face model directory (its config.json is read)")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--rank", type=int, default=8)
    args = p.parse_args()
    cfg_file = args.base / "config.json"
    if not cfg_file.is_file():
        raise SystemExit(f"--base {args.base}: no config.json there. Fix: place the model directory first (docs/gpu.md, 'Models')")
    cfg = json.loads(cfg_file.read_text())
    cfg = cfg.get("text_config", cfg)
    hidden, heads, layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    head_dim = cfg.get("head_dim") or hidden // heads
    kv = cfg.get("num_key_value_heads", heads) * head_dim

    import torch
    from safetensors.torch import save_file

    g = torch.Generator().manual_seed(0)
    tensors = {}
    for i in range(layers):
        for proj, out in (("q_proj", heads * head_dim), ("v_proj", kv)):
            key = f"base_model.model.model.layers.{i}.self_attn.{proj}"
            tensors[f"{key}.lora_A.weight"] = (torch.randn(args.rank, hidden, generator=g) * 0.01).to(torch.bfloat16)
            tensors[f"{key}.lora_B.weight"] = (torch.randn(out, args.rank, generator=g) * 0.01).to(torch.bfloat16)
    args.out.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(args.out / "adapter_model.safetensors"))
    (args.out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": args.rank, "lora_alpha": 2 * args.rank, "lora_dropout": 0.0,
        "target_modules": ["q_proj", "v_proj"], "bias": "none", "fan_in_fan_out": False,
        "base_model_name_or_path": str(args.base.resolve()),
    }, indent=2))
    print(json.dumps({"out": str(args.out), "layers": layers, "rank": args.rank}))


if __name__ == "__main__":
    main()
