"""
Does vLLM sample a request differently when identical requests arrive together than when they
arrive staggered? bench:smoke-chunks' chunked runs start a group's rollouts at once, the
per-rollout path one activity at a time; their episodes differed in length (BENCHMARKS.md,
the smoke section). This sends the first-turn request of a stored trajectory (its messages up
to the first turn's prompt, its tools, the smoke config's sampling) to vLLM in rounds of 4:
all 4 together, or one every `--stagger-s`, alternating the order, and counts each mode's
finish reasons, first tool and completion length.

  python3 src/bench/sampling_arrival.py --trajectory <run>/steps/0/rollouts/<group>/0-<sha>.json [--rounds 14]
"""
import argparse
import collections
import json
import threading
import time
import urllib.request


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trajectory", required=True, help="a ratchet.trajectory/v1 file; its first turn's prompt is sent")
    ap.add_argument("--url", default="http://127.0.0.1:8000/v1/chat/completions")
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--rounds", type=int, default=14)
    ap.add_argument("--stagger-s", type=float, default=1.5)
    ap.add_argument("--out", default=None, help="write every result as JSON here")
    a = ap.parse_args()
    t = json.load(open(a.trajectory))
    n = t["turns"][0]["prompt_message_count"]
    # The body Ratchet's model client sends (src/agent/model.ts), with the smoke config's sampling.
    body = dict(model=a.model, messages=t["messages"][:n], tools=t["tools"], tool_choice="required", parallel_tool_calls=True,
                temperature=1.0, top_p=1.0, top_k=-1, min_p=0, repetition_penalty=1, max_tokens=128, logprobs=True, return_token_ids=True)
    results: list[tuple[str, str, int, str | None]] = []

    def call(mode: str) -> None:
        req = urllib.request.Request(a.url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        r = json.load(urllib.request.urlopen(req, timeout=600))
        c = r["choices"][0]
        tool = (c["message"].get("tool_calls") or [{}])[0].get("function", {}).get("name")
        results.append((mode, c["finish_reason"], r["usage"]["completion_tokens"], tool))

    for rnd in range(a.rounds):
        for mode in (["together", "staggered"] if rnd % 2 == 0 else ["staggered", "together"]):
            threads = []
            for _ in range(4):
                th = threading.Thread(target=call, args=(mode,))
                th.start()
                threads.append(th)
                if mode == "staggered":
                    time.sleep(a.stagger_s)
            for th in threads:
                th.join()
        print(rnd, dict(collections.Counter((m, f) for m, f, _, _ in results)), flush=True)
    for mode in ("together", "staggered"):
        rs = [r for r in results if r[0] == mode]
        print(f"{mode}: {len(rs)} requests, finish {dict(collections.Counter(r[1] for r in rs))}, "
              f"first tool {dict(collections.Counter(r[3] for r in rs))}, mean completion tokens {sum(r[2] for r in rs) / len(rs):.1f}")
    if a.out:
        json.dump(results, open(a.out, "w"))


if __name__ == "__main__":
    main()
