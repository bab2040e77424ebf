"""RL batches across GPU ranks through the worker's own commands, against one process (issue 40).

The gloo tests (tests/test_distributed.py) hold the replicated and FSDP2 steps to one process's on CPU
ranks. This runs the same kinds of batch on NCCL ranks, driven as the trainer worker drives them:
rank 0 leads through `TrainerCommands` with `Ranks` (load, step, save), the other ranks `follow`;
then every rank reads the trained weights (a collective under FSDP2) and rank 0 compares the
update, and every step's metrics, with one process's on one GPU of the same machine.

Batches: the gloo tests' own (odd sample counts, a masked rollout, trajectories split into
segments, fewer trajectories than ranks) and two steps of rl_batches.py's generated RL batches
(groups, dropped rollouts, multi-turn episodes split into segments, long-tailed lengths).
Losses: GRPO and GSPO, sequence-mean and Dr. GRPO normalisation, several mini-batches and epochs,
icepop and masking corrections. The tiny model of the tests in fp32 (TF32 off, torch's default),
eager, padded rows: the tolerance is the gloo tests' (metrics 1e-6 relative, weights
rtol 1e-5 / atol 2e-6), and every difference is recorded as well as pass/fail.

A job that does not finish within `--timeout` is recorded as a timeout (a hang).

  PYTHONPATH=trainer python3 trainer/bench/rl_dist_gpu.py --gpus 2,4 --out $OUT/rl-dist.json
  PYTHONPATH=trainer python3 trainer/bench/rl_dist_gpu.py --device cpu --gpus 2 --out /tmp/rl.json  # gloo check
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

METRICS = ("loss", "entropy", "clip_frac", "ratio_abs_dev", "tokens", "grad_norm")
RTOL, ATOL, METRIC_REL = 1e-5, 2e-6, 1e-6  # dist_worker.assert_same_step's


def make_cases(work: Path) -> list[dict]:
    """The batches (written under work) and the cases over them: name, config overrides, batch per step."""
    import torch

    from helpers import make_cfg
    from rl_batches import make_rl_batch
    from test_distributed import DR_GRPO, GRPO, GSPO, SEQ_MEAN, rl_samples
    from ratchet_trainer.core import Trainer, write_batch
    from ratchet_trainer.core.batch import load_batch

    scorer = Trainer("run", make_cfg("tiny", seq_len=256, micro_batch_tokens=256))  # seed 0: the cases' initial model

    def rescored(name, samples, meta, seed):
        # Behaviour logprobs = the initial model's own plus noise, so ratios and TIS weights are not all 1.
        refs = write_batch(work, name, samples, meta)
        lps = scorer.sample_logprobs(load_batch(*refs))
        g = torch.Generator().manual_seed(seed + 1)
        samples = [{**s, "inference_logprobs": (lp + 0.1 * torch.randn(lp.shape, generator=g)).tolist()}
                   for s, lp in zip(samples, lps)]
        return write_batch(work, name, samples, meta)

    meta = {"run_id": "run", "step": 0, "vocab_size": 256}
    refs = {
        "split": rescored("split", rl_samples((12, 16, 14, 18, 10, 20, 12, 16), trajectories=(0, 1, 1, 2, 3, 4, 5, 6)), meta, 0),
        "odd": rescored("odd", rl_samples((14, 18, 12, 20, 16), trajectories=(0, 1, 1, 1, 2), masked=(4,)), meta, 0),
        "seven": rescored("seven", rl_samples((12, 18, 16, 14, 20, 10, 16), trajectories=(0, 1, 1, 2, 3, 3, 4), masked=(3,)), meta, 0),
        "two": rescored("two", rl_samples((16, 12, 14), trajectories=(0, 0, 1)), meta, 0),
    }
    shapes = {}
    for step in (0, 1):
        samples, manifest = make_rl_batch(step, seq=256, vocab=256, tasks=4, rollouts=4, drop=0.25, template="mixed",
                                          seed=3, run_id="run")
        refs[f"rl{step}"] = rescored(f"rl{step}", samples, manifest, step)
        shapes[f"rl{step}"] = {k: manifest[k] for k in ("num_samples", "num_trajectories", "rollouts", "dropped")}
    several = {**GRPO, "minibatches": 2, "epochs": 2, "optim": {**GRPO["optim"], "lr": 1e-2}}
    rl = {"seq_len": 256, "micro_batch_tokens": 256}
    cases = [
        ("split-grpo", GRPO, ["split"]), ("split-gspo", GSPO, ["split"]),
        ("odd-grpo", GRPO, ["odd"]), ("odd-gspo", GSPO, ["odd"]), ("odd-sequence-mean", SEQ_MEAN, ["odd"]),
        ("odd-dr-grpo", DR_GRPO, ["odd"]), ("odd-minibatches", {**GRPO, "minibatches": 2}, ["odd"]),
        ("seven-gspo", GSPO, ["seven"]), ("two-trajectories-gspo", GSPO, ["two"]),
        ("tis-grpo-2x2", several, ["split"]), ("icepop-gspo-2x2", {**several, "loss": {"kind": "gspo", "correction": "icepop"}}, ["split"]),
        ("mask-grpo-2x2", {**several, "loss": {"correction": "mask"}}, ["split"]),
        ("rl-grpo-2steps", {**GRPO, **rl}, ["rl0", "rl1"]), ("rl-gspo-2steps", {**GSPO, **rl}, ["rl0", "rl1"]),
        ("rl-grpo-2x2-2steps", {**several, **rl}, ["rl0", "rl1"]),
    ]
    return [{"name": n, "over": o, "batches": [refs[b] for b in bs], "batch_names": bs,
             "shapes": {b: shapes[b] for b in bs if b in shapes}} for n, o, bs in cases]


def case_cfg(over: dict, device: str, parallelism: str | None):
    from helpers import make_cfg

    model = {**over.get("model", {}), "dtype": "float32", "compile": False}
    extra = {"parallelism": parallelism} if parallelism else {}
    return make_cfg("tiny", **{**over, "model": model, "device": device, "packing": False, **extra})


def run_cases(cmds, cases, device: str, parallelism: str | None, follower_loop=None) -> dict:
    """Each case through the commands on a fresh trainer: load, a step per batch, save; then every rank
    reads the trained weights. On a follower rank `follower_loop` runs rank 0's commands until it stops them."""
    import torch

    from ratchet_trainer.core.distributed import local_tensor

    out = {}
    for case in cases:
        name = case["name"]
        rec: dict = {}
        if follower_loop is None:
            cfg = case_cfg(case["over"], device, parallelism)
            cmds.load({"run_id": "run", "trainer_config": cfg.to_dict(), "checkpoint": None})
            rec["metrics"], rec["step_s"] = [], []
            for i, (batch, manifest) in enumerate(case["batches"]):
                t = time.perf_counter()
                m, _ = cmds.step({"run_id": "run", "step": i, "batch": batch, "manifest": manifest})
                rec["step_s"].append(time.perf_counter() - t)
                rec["metrics"].append(m)
            rec["checkpoint"] = cmds.save({"run_id": "run", "step": len(case["batches"]) - 1})["checkpoint"]["uri"]
            cmds.stop_followers()
        else:
            follower_loop()
        rec["state"] = {k: local_tensor(v.detach()).float().cpu().clone() for k, v in cmds.trainer.trainable_state().items()}
        out[name] = rec
        cmds.trainer = None
        if device == "cuda":
            torch.cuda.empty_cache()
    return out


def compare(ref: dict, got: dict, parallelism: str) -> dict:
    import torch

    res: dict = {"problems": []}
    worst_metric = 0.0
    for step, (a, b) in enumerate(zip(ref["metrics"], got["metrics"])):
        if b.get("parallelism") != parallelism:
            res["problems"].append(f"step {step}: parallelism {b.get('parallelism')!r}, expected {parallelism!r}")
        for k in METRICS:
            rel = abs(a[k] - b[k]) / max(1.0, abs(a[k]))
            worst_metric = max(worst_metric, rel)
            if rel > METRIC_REL:
                res["problems"].append(f"step {step} {k}: one process {a[k]!r}, ranks {b[k]!r}")
    worst_abs, worst_rel = 0.0, 0.0
    if ref["state"].keys() != got["state"].keys():
        res["problems"].append("the trained tensors' names differ")
    for k, v in ref["state"].items():
        w = got["state"].get(k)
        if w is None:
            continue
        d = (w - v).abs()
        worst_abs = max(worst_abs, float(d.max()))
        worst_rel = max(worst_rel, float((d / v.abs().clamp_min(ATOL / RTOL)).max()))
        try:
            torch.testing.assert_close(w, v, rtol=RTOL, atol=ATOL)
        except AssertionError as e:
            res["problems"].append(f"{k}: {str(e).splitlines()[0]}")
    res.update(passed=not res["problems"], metric_max_rel_diff=worst_metric, weights_max_abs_diff=worst_abs,
               weights_max_rel_diff=worst_rel, trained_tensors=len(ref["state"]),
               one_process_loss=[m["loss"] for m in ref["metrics"]], ranks_loss=[m["loss"] for m in got["metrics"]],
               step_s=got["step_s"])
    res["pass"] = res.pop("passed")
    res["problems"] = res["problems"][:5]
    return res


def single_main(args) -> None:
    import torch

    from ratchet_trainer.commands import TrainerCommands

    cases = json.loads(Path(args.cases).read_text())
    cmds = TrainerCommands(Path(args.work) / "single", "one process")
    out = run_cases(cmds, cases, args.device, None)
    torch.save(out, args.result)


def rank_main(args) -> None:
    import torch
    import torch.distributed as dist

    from ratchet_trainer.commands import TrainerCommands, follow
    from ratchet_trainer.ranks import Ranks

    cases = json.loads(Path(args.cases).read_text())
    ranks = Ranks()  # as the worker under torchrun: NCCL (CUDA) or gloo for the model, gloo for commands
    root = Path(args.work) / f"ranks-{args.parallelism}-{ranks.size}"
    cmds = TrainerCommands(root, f"rank {ranks.rank}", ranks)
    loop = None if ranks.leader else (lambda: follow(ranks, cmds))
    t0 = time.perf_counter()
    got = run_cases(cmds, cases, args.device, args.parallelism, loop)
    wall = time.perf_counter() - t0
    if ranks.leader:
        ref = torch.load(args.ref, weights_only=False)
        rec = {"parallelism": args.parallelism, "ranks": ranks.size, "backend": str(dist.get_backend()),
               "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "wall_s": wall,
               "cases": {c["name"]: {**compare(ref[c["name"]], got[c["name"]], args.parallelism),
                                     "batches": c["batch_names"], "shapes": c["shapes"]} for c in cases}}
        rec["all_pass"] = all(c["pass"] for c in rec["cases"].values())
        Path(args.result).write_text(json.dumps(rec))
    dist.barrier(group=ranks.control)
    dist.destroy_process_group()


def driver(args) -> None:
    import torch

    work = Path(args.work or tempfile.mkdtemp(prefix="rl-dist-"))
    work.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    cases = make_cases(work / "batches")
    (work / "cases.json").write_text(json.dumps(cases))
    results: dict = {"argv": sys.argv, "torch": torch.__version__, "tolerance": {"metrics_rel": METRIC_REL, "rtol": RTOL, "atol": ATOL},
                     "cases": [{k: c[k] for k in ("name", "over", "batch_names", "shapes")} for c in cases], "jobs": []}
    common = ["--cases", str(work / "cases.json"), "--work", str(work), "--device", args.device]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"} if args.device == "cuda" else dict(os.environ)
    t = time.perf_counter()
    ref = work / "single.pt"
    proc = subprocess.run([sys.executable, __file__, "--single", "--result", str(ref), *common], env=env,
                          capture_output=True, text=True, timeout=args.timeout)
    results["one_process"] = {"wall_s": time.perf_counter() - t, "rc": proc.returncode}
    if proc.returncode != 0:
        results["one_process"]["error"] = proc.stderr[-2000:]
        out.write_text(json.dumps(results, indent=1))
        raise SystemExit(f"the one-process reference failed:\n{proc.stderr[-2000:]}")
    for par in args.parallelism.split(","):
        for n in [int(g) for g in args.gpus.split(",")]:
            res = work / f"{par}-{n}.json"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={n}", __file__,
                   "--rank-mode", "--parallelism", par, "--ref", str(ref), "--result", str(res), *common]
            print("$", " ".join(cmd), flush=True)
            t = time.perf_counter()
            try:
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                rec = json.loads(res.read_text()) if res.exists() else {
                    "parallelism": par, "ranks": n, "status": "crashed", "rc": proc.returncode, "error": proc.stderr[-3000:]}
            except subprocess.TimeoutExpired:
                rec = {"parallelism": par, "ranks": n, "status": "timeout", "error": f"no result within {args.timeout}s (a hang)"}
            rec["job_wall_s"] = time.perf_counter() - t
            results["jobs"].append(rec)
            out.write_text(json.dumps(results, indent=1))
            if "cases" in rec:
                bad = {k: v["problems"] for k, v in rec["cases"].items() if not v["pass"]}
                worst = max(v["weights_max_abs_diff"] for v in rec["cases"].values())
                print(f"{par} x{n}: {'all pass' if not bad else 'FAIL ' + json.dumps(bad)[:1500]}; "
                      f"largest weight difference {worst:.2e}; {rec['job_wall_s']:.0f} s", flush=True)
            else:
                print(f"{par} x{n}: {rec.get('status')}: {rec.get('error', '')[-1500:]}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="rl-dist.json")
    ap.add_argument("--gpus", default="2,4", help="rank counts, one job each")
    ap.add_argument("--parallelism", default="replicate,fsdp")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--work", help="where batches and checkpoints go (default: a fresh temporary directory)")
    ap.add_argument("--single", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank-mode", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--cases", help=argparse.SUPPRESS)
    ap.add_argument("--ref", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.single:
        single_main(args)
    elif args.rank_mode:
        rank_main(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
