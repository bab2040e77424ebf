"""Python baseline for the sample-builder benchmark (src/bench/builder.ts runs it).

Usage: python builder_baseline.py MODEL_DIR TRAJECTORY_DIR REPEATS

What a builder that re-tokenizes text must do with Hugging Face tokenizers, timed on
the same trajectory JSON files the TypeScript builder reads:
- full: apply_chat_template(messages, tools) + encode, once per conversation
  (the least work possible: it yields ids but no loss mask);
- per_turn: for each assistant turn, render and encode the conversation up to the
  turn's prompt and up to its reply, to locate the reply's tokens for the mask
  (the usual way to build an assistant mask from text).
Prints one JSON line: seconds (median of REPEATS) and tokens, JSON reading timed apart.
"""

from __future__ import annotations

import json
import logging
import statistics
import sys
import time
from pathlib import Path

from transformers import AutoTokenizer

log = logging.getLogger("builder_baseline")


def main() -> None:
    model_dir, traj_dir, repeats = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    t0 = time.perf_counter()
    trajs = [json.loads(p.read_text()) for p in sorted(traj_dir.rglob("*.json"))]
    read_s = time.perf_counter() - t0

    def encode(messages, tools, gen):
        text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
        return tok.encode(text, add_special_tokens=False)

    full, per_turn, tokens = [], [], 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = 0
        for t in trajs:
            tokens += len(encode(t["messages"], t["tools"], False))
        full.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for t in trajs:
            for turn in t["turns"]:
                n = turn["prompt_message_count"]
                encode(t["messages"][:n], t["tools"], True)
                encode(t["messages"][: n + 1], t["tools"], False)
        per_turn.append(time.perf_counter() - t0)
    print(json.dumps({"full_s": statistics.median(full), "per_turn_s": statistics.median(per_turn), "tokens": tokens,
                      "read_s": read_s, "trajectories": len(trajs)}))


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    main()
