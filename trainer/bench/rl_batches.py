"""RL-shaped training batches in the trainer's own file format (safetensors + manifest, docs/contracts.md).

No recorded batch of the CPU stack is kept in the repository (runs write them under
runs/<run>/steps/<step>/batch.safetensors in the artifact store, which is not checked in), and the GPU box has
no Temporal, Node or Docker to make one. This writes batches shaped like the ones
src/samples/builder.ts records, with the same tensors and manifest keys:

- groups of `rollouts` rollouts per task; group-relative advantages (reward - mean) / std;
- dropped rollouts (infrastructure / task setup failures, ~`drop` of them), absent from
  the tensors and counted in `manifest.dropped`, as the builder drops them;
- multi-turn episodes; under a template that rewrites earlier turns (Qwen3's) each turn
  is its own sample (a segment: the history as masked context, the turn trainable) and
  `trajectory_index` ties the segments to their trajectory; under a prefix-stable
  template one sample holds every turn, tool output masked;
- long-tailed lengths: turns and tool outputs log-normal, the whole sample cut at seq_len;
- behaviour logprobs close to what a random-init model gives (-log V plus noise).

  python3 trainer/bench/rl_batches.py --out DIR --steps 24 --seq 4096 --vocab 151936
  python3 trainer/bench/replay_batches.py --batches DIR ...      # trains on them
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ratchet_trainer.core.batch import write_batch  # noqa: E402


def _lognormal(g: torch.Generator, median: float, sigma: float) -> int:
    return max(1, int(median * math.exp(sigma * float(torch.randn(1, generator=g)))))


def make_rl_batch(step: int, *, seq: int, vocab: int, tasks: int = 4, rollouts: int = 4, drop: float = 0.1,
                  template: str = "mixed", seed: int = 0, run_id: str = "replay") -> tuple[list[dict], dict]:
    """(samples for write_batch, manifest extras) of one step; deterministic in (seed, step)."""
    g = torch.Generator().manual_seed(seed * 100_003 + step)
    samples: list[dict] = []
    dropped = {"infrastructure": 0, "task_setup": 0, "missing_reward": 0, "uniform_group": 0, "stale": 0,
               "truncated_masked": 0, "no_trainable_tokens": 0}
    base_lp = -math.log(vocab)
    trajectory = 0
    truncated = 0
    for task in range(tasks):
        prompt = int(seq * (0.06 + 0.14 * float(torch.rand(1, generator=g))))  # system + task
        prompt_ids = torch.randint(0, vocab, (prompt,), generator=g).tolist()
        kept = []
        for r in range(rollouts):
            u = float(torch.rand(1, generator=g))
            if u < drop:  # lost container / setup error: recorded, never trained on
                dropped["infrastructure" if u < drop / 2 else "task_setup"] += 1
                continue
            kept.append((r, float(torch.randn(1, generator=g))))
        if not kept:
            continue
        rewards = torch.tensor([k[1] for k in kept])
        std = float(rewards.std()) if len(kept) > 1 else 0.0
        if len(kept) > 1 and std > 0:
            advs = ((rewards - rewards.mean()) / std).tolist()
        else:
            advs = [0.0] * len(kept)
        for (r, _), adv in zip(kept, advs):
            split = template == "split" or (template == "mixed" and (task + r) % 2 == 0)
            turns = 1 + min(int(-math.log(max(1e-9, float(torch.rand(1, generator=g)))) * 2.0), 11)
            history: list[int] = list(prompt_ids)
            hist_mask: list[int] = [0] * prompt
            segs = []
            for t in range(turns):
                comp = torch.randint(0, vocab, (_lognormal(g, 120, 0.9),), generator=g).tolist()
                if split:
                    ids = history + comp
                    mask = [0] * len(history) + [1] * len(comp)
                    segs.append((ids, mask))
                history = history + comp
                hist_mask = hist_mask + [1] * len(comp)
                if t < turns - 1:
                    obs = torch.randint(0, vocab, (_lognormal(g, 200, 1.0),), generator=g).tolist()
                    history += obs
                    hist_mask += [0] * len(obs)
                if len(history) >= seq:
                    break
            if not split:
                segs = [(history, hist_mask)]
            n_kept = 0
            for ids, mask in segs:
                if len(ids) > seq:
                    ids, mask = ids[:seq], mask[:seq]
                    truncated += 1
                mask = [0] + mask[1:]
                if sum(mask) == 0:
                    dropped["no_trainable_tokens"] += 1
                    continue
                noise = (torch.randn(len(ids), generator=g) * 0.05).tolist()
                samples.append({"input_ids": ids, "loss_mask": mask, "advantage": adv,
                                "inference_logprobs": [base_lp + z for z in noise], "trajectory": trajectory})
                n_kept += 1
            if n_kept:
                trajectory += 1
    manifest = {"run_id": run_id, "step": step, "vocab_size": vocab, "seq_len": seq, "num_samples": len(samples),
                "num_trajectories": trajectory, "rollouts": tasks * rollouts, "groups": tasks, "dropped": dropped,
                "truncated_samples": truncated, "synthetic": {"generator": "trainer/bench/rl_batches.py", "seed": seed,
                                                               "template": template, "drop": drop}}
    return samples, manifest


def write_rl_batches(out: Path, steps: int, **kw) -> list[Path]:
    paths = []
    for step in range(steps):
        samples, manifest = make_rl_batch(step, **kw)
        write_batch(out, f"batch-{step:04d}", samples, manifest)
        paths.append(out / f"batch-{step:04d}.safetensors")
    return paths


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--vocab", type=int, default=151936)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--rollouts", type=int, default=4)
    ap.add_argument("--drop", type=float, default=0.1)
    ap.add_argument("--template", choices=["split", "prefix", "mixed"], default="mixed")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    paths = write_rl_batches(Path(a.out), a.steps, seq=a.seq, vocab=a.vocab, tasks=a.tasks, rollouts=a.rollouts,
                             drop=a.drop, template=a.template, seed=a.seed)
    for p in paths:
        m = json.loads(p.with_suffix(".json").read_text())
        print(f"{p.name}: {m['num_samples']} samples, {m['num_trajectories']} trajectories, dropped {sum(m['dropped'].values())}")


if __name__ == "__main__":
    main()
