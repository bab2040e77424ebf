"""Write a small peft LoRA adapter for the converted SmolLM2 model, with random non-zero
B matrices so that serving it visibly changes the logprobs (a freshly initialised LoRA
has B = 0 and is indistinguishable from the base). The inference integration test loads
it into vLLM with /v1/load_lora_adapter.

Run in the trainer venv:
    python infra/vllm/make_test_lora.py --base .ratchet/models/SmolLM2-135M-Instruct --out /tmp/lora
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger("ratchet.make_test_lora")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--base", required=True, type=Path, help="converted HF model directory")
    p.add_argument("--out", required=True, type=Path, help="adapter output directory")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=float, default=0.05, help="std of the random B entries")
    args = p.parse_args(argv)
    if not (args.base / "config.json").is_file():
        raise SystemExit(f"--base {args.base}: no config.json there. Fix: run infra/inference.sh install first.")

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(args.seed)
    model = AutoModelForCausalLM.from_pretrained(str(args.base), dtype=torch.float32)
    cfg = LoraConfig(r=args.rank, lora_alpha=2 * args.rank, lora_dropout=0.0,
                     target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, cfg)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, args.scale)
    peft_model.save_pretrained(str(args.out))
    log.info("wrote LoRA adapter (r=%d, q_proj+v_proj) to %s", args.rank, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
