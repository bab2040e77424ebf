"""Decode throughput of the inference server at a given concurrency.

Streams chat completions with a fixed output length (vLLM's `ignore_eos`) so that every
request decodes the same number of tokens, and reports, per concurrency level:
  - output tok/s: all completion tokens / wall time of the round (what a rollout batch sees)
  - per-request decode tok/s: (tokens - 1) / (last token time - first token time)
  - time to first token (prefill + queueing)

Stdlib only, so it runs with any python3:
    python3 infra/vllm/bench_decode.py --concurrency 1 16 --max-tokens 128
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import threading
import time
import urllib.request
from dataclasses import dataclass

log = logging.getLogger("ratchet.bench_decode")

PROMPT = "Write a long, detailed story about a robot who learns to repair old radios."


@dataclass
class Sample:
    ttft: float
    decode_s: float
    tokens: int
    total_s: float


def one_request(url: str, model: str, max_tokens: int, seed: int) -> Sample:
    body = {
        "model": model,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 1.0,
        "seed": seed,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    req = urllib.request.Request(f"{url}/chat/completions", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    t0 = time.perf_counter()
    first = last = None
    tokens = 0
    with urllib.request.urlopen(req, timeout=600) as res:
        for raw in res:
            line = raw.decode().strip()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[len("data: "):])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if chunk.get("choices") and chunk["choices"][0].get("delta", {}).get("content"):
                now = time.perf_counter()
                first = first or now
                last = now
    if first is None or last is None or tokens == 0:
        raise RuntimeError(f"{url}: the stream carried no tokens; is the server serving {model}?")
    return Sample(ttft=first - t0, decode_s=last - first, tokens=tokens, total_s=last - t0)


def run_round(url: str, model: str, concurrency: int, max_tokens: int) -> dict:
    samples: list[Sample] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(i: int) -> None:
        try:
            s = one_request(url, model, max_tokens, seed=i)
            with lock:
                samples.append(s)
        except BaseException as e:  # noqa: BLE001 - reported below, with the others
            with lock:
                errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"{len(errors)} of {concurrency} requests failed: {errors[0]}")
    total = sum(s.tokens for s in samples)
    return {
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "completion_tokens": total,
        "wall_s": round(wall, 2),
        "output_tok_per_s": round(total / wall, 1),
        "per_request_decode_tok_per_s": round(statistics.median(
            (s.tokens - 1) / s.decode_s for s in samples if s.decode_s > 0), 1),
        "ttft_median_s": round(statistics.median(s.ttft for s in samples), 2),
    }


def main(argv: list[str]) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", default="http://127.0.0.1:8000/v1")
    p.add_argument("--model", default="smollm2-135m")
    p.add_argument("--concurrency", type=int, nargs="+", default=[1, 16])
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--warmup", type=int, default=1, help="untimed requests first")
    args = p.parse_args(argv)
    for i in range(args.warmup):
        one_request(args.url, args.model, 16, seed=10_000 + i)
    for c in args.concurrency:
        result = run_round(args.url, args.model, c, args.max_tokens)
        log.info("concurrency %d: %s", c, result)
        sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
