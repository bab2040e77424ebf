"""The trainer worker under torchrun on N GPUs, driven by Temporal, through a rank kill and an
out-of-memory (issue 40).

One command does it all on the device machine: it starts a Temporal dev server (a carried binary,
`--temporal`), then for each `--parallelism` the trainer as `ratchet up` launches it on GPUs
(src/layout: `torchrun --standalone --nproc-per-node N --max-restarts 0`, rank 0 the Temporal worker,
the others following it, NCCL for the model), under a restart loop standing in for the supervisor
(systemd's Restart=always): a job that ends is started again. The workflow is the trainer's Temporal
tests' own (tests/flow_wf.py, TrainerRecoveryTestFlow): announce, load, then step and save per batch;
on a failed activity it announces again and loads the last checkpoint.

Four steps, two faults:
- step 1: rank 0 sleeps after its first micro-batch (the worker's fault hook, once) and this driver
  SIGKILLs rank `--kill-rank` then: torchrun stops the job, the loop starts it again;
- step 2: rank `--oom-rank` runs out of GPU memory inside the step (its allocator capped at what it
  holds after load plus 16 MiB, a stand-in for vLLM taking the rest of the card; once): that rank exits
  with code 70 at once (ranks.in_lockstep), torchrun stops the job, the loop starts it again.
Every step's metrics, and the adapter saved after step 3, are compared with one process's
uninterrupted run of the same batches on one GPU (computed here first): each step applied exactly
once. Also checked: two reloads on every rank of the new jobs, the checkpoint's world size, torchrun's
report of exit code 70 and of the SIGKILL, and the OOM's own message in the rank's log.

  python3 trainer/bench/worker_temporal_gpu.py --temporal /tmp/temporal --nproc 4 --out $OUT/worker-temporal.json
  python3 trainer/bench/worker_temporal_gpu.py --device cpu --nproc 4 --tiny --temporal .ratchet/venvs/tools/bin/temporal \
      --port 7399 --out /tmp/wt.json   # gloo rehearsal; the OOM is raised, not hit
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

OOM_RANK_ENV, OOM_STEP_ENV, OOM_MARKER_ENV = "RATCHET_BENCH_OOM_RANK", "RATCHET_BENCH_OOM_STEP", "RATCHET_BENCH_OOM_MARKER"
OOM_SLACK = 16 * 2**20
STEPS, KILL_STEP, OOM_STEP = 4, 1, 2

# Small enough to build in seconds, large enough that a micro-batch needs fresh GPU memory
# (one 512-token row's fp32 logits are 64 MB), fp32 so one process's update is the reference.
MODEL = {"model_type": "qwen3", "vocab_size": 32000, "hidden_size": 512, "intermediate_size": 1536,
         "num_hidden_layers": 4, "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64,
         "rope_theta": 1_000_000.0, "max_position_embeddings": 1024, "tie_word_embeddings": True, "rms_norm_eps": 1e-6}
TINY = {**MODEL, "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}


# -- on every rank (torchrun runs this file with --as-worker) -------------------------------------

def install_oom_fault() -> None:
    """On the rank named by RATCHET_BENCH_OOM_RANK, step RATCHET_BENCH_OOM_STEP runs out of memory once
    (the marker file says it happened): the CUDA allocator is capped at what this process holds plus
    16 MiB, so the step's first fresh allocation fails inside the real forward. On a CPU the error is raised."""
    import torch

    target = os.environ.get(OOM_RANK_ENV)
    if target is None or int(os.environ.get("RANK", "0")) != int(target):
        return
    at, marker = int(os.environ[OOM_STEP_ENV]), Path(os.environ[OOM_MARKER_ENV])
    from ratchet_trainer.core import trainer as trainer_mod

    real_step = trainer_mod.Trainer.step

    def step(self, step, batch, *a, **kw):
        if step == at and not marker.exists():
            info = {"rank": int(os.environ["RANK"]), "step": step, "pid": os.getpid(), "t": time.time()}
            if self.device.type == "cuda":
                dev = torch.cuda.current_device()
                torch.cuda.empty_cache()
                total = torch.cuda.get_device_properties(dev).total_memory
                cap = torch.cuda.memory_reserved(dev) + OOM_SLACK
                torch.cuda.set_per_process_memory_fraction(cap / total, dev)
                info.update(cap_bytes=cap, allocated_bytes=torch.cuda.memory_allocated(dev), total_bytes=total)
            marker.write_text(json.dumps(info))
            print(json.dumps({"message": "bench: out-of-memory fault armed", **info}), file=sys.stderr, flush=True)
            if self.device.type != "cuda":
                raise torch.OutOfMemoryError("out of memory (raised by the bench on a CPU rank)")
        return real_step(self, step, batch, *a, **kw)

    trainer_mod.Trainer.step = step


def worker_entry(argv: list[str]) -> None:
    sys.path.insert(0, str(REPO / "trainer"))
    install_oom_fault()
    from ratchet_trainer.worker import main

    sys.argv = ["ratchet_trainer.worker", *argv]
    main()


# -- the driver ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_temporal(binary: str, port: int, work: Path) -> subprocess.Popen:
    log = open(work / "temporal.log", "w")
    p = subprocess.Popen([binary, "server", "start-dev", "--headless", "--ip", "127.0.0.1", "--port", str(port),
                          "--db-filename", str(work / "temporal.db"), "--log-level", "warn"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return p
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                raise SystemExit(f"the Temporal dev server did not start: {(work / 'temporal.log').read_text()[-2000:]}")
            time.sleep(0.3)


def read_ready(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # not written yet, or being written


def step_samples(vocab: int, seq: int, n: int, seed: int) -> list[dict]:
    """n samples in n trajectories, each longer than half a micro-batch (one row a micro-batch, padded):
    every rank gets two micro-batches, so the worker's fault hook runs between them."""
    import torch

    from helpers import make_samples

    g = torch.Generator().manual_seed(seed)
    lengths = [int(x) for x in torch.randint(seq // 2 + 8, seq - 8, (n,), generator=g)]
    adv = [1.0 if i % 2 == 0 else -1.0 for i in range(n)]
    return make_samples(vocab, lengths=lengths, prompt=8, advantages=adv, seed=seed)


def run_flow(args, par: str, address: str, work: Path) -> dict:
    import torch
    from safetensors.torch import load_file
    from temporalio.client import Client
    from temporalio.worker import Worker

    from flow_wf import TrainerRecoveryTestFlow
    from helpers import assert_same_update, make_cfg, on_policy_batch, snapshot
    from ratchet_trainer.core import Trainer, load_batch
    from ratchet_trainer.core.artifacts import uri_to_path

    work.mkdir(parents=True)
    cuda = args.device == "cuda"
    seq = 64 if args.tiny else 512
    cfg = make_cfg("tiny", model={"config": TINY if args.tiny else MODEL, "dtype": "float32", "compile": False},
                   device=args.device, packing=False, parallelism=par, seq_len=seq, micro_batch_tokens=seq,
                   optim={"lr": 5e-3, "weight_decay": 0.0})
    rec: dict = {"parallelism_asked": par, "nproc": args.nproc, "device": args.device, "steps": STEPS,
                 "kill": {"step": KILL_STEP, "rank": args.kill_rank}, "oom": {"step": OOM_STEP, "rank": args.oom_rank},
                 "model": "tiny" if args.tiny else MODEL, "seq_len": seq}

    # One process's uninterrupted run: the batches (on-policy for the model each step starts from) and the want.
    t0 = time.perf_counter()
    ref = Trainer("run", cfg)
    batches, want = [], []
    for k in range(STEPS):
        b = on_policy_batch(ref, work, step_samples(ref.vocab_size, seq, 2 * args.nproc, seed=k), k)
        batches.append(b)
        want.append(ref.step(k, load_batch(*b)))
    want_w = {k: v.cpu() for k, v in snapshot(ref).items()}  # the saved adapter is read onto the CPU
    del ref
    if cuda:
        torch.cuda.empty_cache()
    rec["reference_s"] = time.perf_counter() - t0

    shared = f"ratchet-trainer-gpu-{uuid.uuid4().hex[:8]}"
    ready, fault_marker, oom_marker = work / "trainer.ready", work / "fault.marker", work / "oom.marker"
    log_path = Path(args.out).parent / f"torchrun-{par}.log"  # beside the result: it comes back even if the command is cut off
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "trainer"), os.environ.get("PYTHONPATH", "")]),
           "PYTHONUNBUFFERED": "1", "RATCHET_METRICS_PORT": "off",
           "RATCHET_TRAINER_FAULT_SLEEP_S": "60", "RATCHET_TRAINER_FAULT_STEP": str(KILL_STEP),
           "RATCHET_TRAINER_FAULT_MARKER": str(fault_marker), "RATCHET_TRAINER_FAULT_ONCE": "1",
           OOM_RANK_ENV: str(args.oom_rank), OOM_STEP_ENV: str(OOM_STEP), OOM_MARKER_ENV: str(oom_marker)}
    exits = work / "job.exits"
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(args.nproc),
              "--max-restarts", "0", str(Path(__file__).resolve()), "--as-worker",
              "--address", address, "--artifacts", str(work / "art"), "--ready-file", str(ready), "--shared-queue", shared]
    # The supervisor: every exit of the job, whatever its status, starts it again.
    cmd = ["bash", "-c", f"while true; do {shlex.join(launch)}; echo $? >> {shlex.quote(str(exits))}; sleep 1; done"]
    rec["command"] = shlex.join(launch)
    events: list[dict] = []
    start = time.monotonic()

    def event(what: str, **kw) -> None:
        events.append({"t_s": round(time.monotonic() - start, 2), "event": what, **kw})
        print(f"[{par}] {events[-1]}", flush=True)

    job = subprocess.Popen(cmd, env=env, stdout=open(log_path, "w"), stderr=subprocess.STDOUT, start_new_session=True)
    generations: list[dict] = []

    async def next_generation(timeout: float) -> dict:
        seen = {g["task_queue"] for g in generations}
        deadline = time.monotonic() + timeout
        while True:
            r = read_ready(ready)
            if r and r["task_queue"] not in seen:
                generations.append(r)
                event("job generation polling", generation=len(generations), world_size=r["world_size"], pids=r["rank_pids"])
                return r
            if job.poll() is not None:
                raise RuntimeError(f"the restart loop exited with {job.returncode}: {log_path.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no new trainer job within {timeout}s: {log_path.read_text()[-3000:]}")
            await asyncio.sleep(0.2)

    async def wait_for(path: Path, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{path.name} not written within {timeout}s: {log_path.read_text()[-3000:]}")
            await asyncio.sleep(0.1)

    async def drive() -> dict:
        first = await next_generation(args.start_timeout)
        client = await Client.connect(address)
        wf_queue = f"{shared}-wf"
        async with Worker(client, task_queue=wf_queue, workflows=[TrainerRecoveryTestFlow]):
            handle = await client.start_workflow(
                TrainerRecoveryTestFlow.run,
                {"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": batches,
                 "step_heartbeat_timeout_s": 20},
                id=f"trainer-gpu-{par}-{uuid.uuid4().hex[:8]}", task_queue=wf_queue)
            event("workflow started")
            await wait_for(fault_marker, args.start_timeout)
            victim = first["rank_pids"][args.kill_rank]
            os.kill(victim, signal.SIGKILL)
            event("SIGKILL sent", rank=args.kill_rank, pid=victim, rank0_progress=json.loads(fault_marker.read_text()))
            await next_generation(args.start_timeout)
            await wait_for(oom_marker, args.start_timeout)
            event("out-of-memory armed", **json.loads(oom_marker.read_text()))
            await next_generation(args.start_timeout)
            out = await asyncio.wait_for(handle.result(), timeout=args.start_timeout * 2)
            event("workflow completed", recoveries=out["recoveries"])
            return out

    try:
        out = asyncio.run(drive())
    except Exception as e:  # noqa: BLE001 - recorded with the log's tail
        out = None
        rec["error"] = f"{type(e).__name__}: {str(e)[:3000]}"
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
            try:
                job.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(job.pid, signal.SIGKILL)
                job.wait(30)
    rec.update(events=events, generations=generations, wall_s=time.monotonic() - start,
               job_exit_codes=exits.read_text().split() if exits.exists() else [])
    log = log_path.read_text(errors="replace")
    if out is None:
        rec["status"] = "error"
        return rec

    checks: dict[str, bool | str] = {}

    def check(name: str, fn) -> None:
        try:
            ok = fn()
            checks[name] = True if ok is None or ok is True else f"false: {ok}"
        except AssertionError as e:
            checks[name] = f"false: {str(e)[:500]}"

    results = out["results"]
    queues = [g["task_queue"] for g in generations]
    rec["recoveries"] = out["recoveries"]
    rec["steps_detail"] = [{"step": k, "queue_generation": queues.index(r["queue"]) + 1 if r["queue"] in queues else None,
                            "applied": r["metrics"].get("applied"), "parallelism": r["metrics"].get("parallelism"),
                            **{f"{key}": r["metrics"].get(key) for key in ("loss", "entropy", "grad_norm", "tokens")},
                            **{f"want_{key}": want[k][key] for key in ("loss", "entropy", "grad_norm", "tokens")},
                            "max_rel_diff": max(abs(r["metrics"][key] - want[k][key]) / max(abs(want[k][key]), 1e-12)
                                                for key in ("loss", "entropy", "grad_norm", "tokens"))}
                           for k, r in enumerate(results)]
    check("recoveries == 2", lambda: out["recoveries"] == 2 or out["recoveries"])
    check("3 job generations, each of nproc ranks", lambda: (len(generations) == 3 and all(
        g["world_size"] == args.nproc for g in generations)) or [g["world_size"] for g in generations])
    # step 0 on the first job, 1 and 2 redone on the second and third, 3 on the third.
    check("steps ran on generations 1,2,3,3", lambda: [d["queue_generation"] for d in rec["steps_detail"]] == [1, 2, 3, 3]
          or [d["queue_generation"] for d in rec["steps_detail"]])
    check("every step applied, its metrics one process's (rel 1e-4)", lambda: all(
        d["applied"] is True and d["max_rel_diff"] < 1e-4 for d in rec["steps_detail"]) or rec["steps_detail"])
    adapter = load_file(str(uri_to_path(results[-1]["saved"]["adapter"]["uri"]) / "adapter_model.safetensors"))
    diffs = {k: float((adapter[k].float() - v.float()).abs().max()) for k, v in want_w.items() if k in adapter}
    rec["adapter_max_abs_diff"] = max(diffs.values()) if diffs else None
    check("saved adapter after step 3 == one process's (assert_same_update)",
          lambda: assert_same_update(adapter, want_w, lr=cfg.optim.lr))
    ckpt = uri_to_path(results[-1]["saved"]["checkpoint"]["uri"])
    state = json.loads((ckpt / "trainer_state.json").read_text())
    rec["checkpoint_state"] = {k: state.get(k) for k in ("step", "world_size", "sharded", "parallelism")}
    used = rec["steps_detail"][0]["parallelism"]
    rec["parallelism_used"] = used
    # FSDP2 saves shards of every rank (world size recorded); replicated ranks save rank 0's whole state.
    check("checkpoint layout: fsdp sharded over nproc, replicate whole", lambda: (
        (state.get("sharded") is True and state.get("world_size") == args.nproc) if used == "fsdp"
        else not state.get("sharded")) or rec["checkpoint_state"])
    restored = [json.loads(line) for line in log.splitlines() if line.startswith("{") and '"checkpoint restored"' in line]
    rec["restored"] = [{k: r.get(k) for k in ("step", "world_size", "sharded")} for r in restored]
    check("2 x nproc reloads, every one at world_size nproc",
          lambda: (len(restored) == 2 * args.nproc and all(r["world_size"] == args.nproc for r in restored)) or rec["restored"])
    codes = re.findall(r"exitcode\s*:\s*(-?\d+)", log)
    rec["torchrun_rank_exitcodes"] = codes
    check("torchrun saw exit 70 (the OOM rank) and -9 (the SIGKILL)", lambda: ("70" in codes and "-9" in codes) or codes)
    check("two jobs ended (exit != 0) before the last", lambda: (len(rec["job_exit_codes"]) >= 2 and all(
        c != "0" for c in rec["job_exit_codes"][:2])) or rec["job_exit_codes"])
    oom_lines = [line for line in log.splitlines() if "group cannot go on" in line]
    rec["oom_exit_lines"] = [line[:800] for line in oom_lines]
    check("the rank's own exit line names the out-of-memory",
          lambda: any("out of memory" in line.lower() for line in oom_lines) or "no such line")
    rec["checks"] = checks
    rec["status"] = "pass" if all(v is True for v in checks.values()) else "fail"
    return rec


def driver(args) -> int:
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(args.work) / f"wt-{uuid.uuid4().hex[:6]}"
    work.mkdir(parents=True)
    port = args.port or free_port()
    address = f"127.0.0.1:{port}"
    os.environ["TEMPORAL_ADDRESS"] = address  # helpers reads it at import
    sys.path[:0] = [str(REPO / "trainer"), str(REPO / "trainer" / "tests")]
    import torch

    if args.device == "cuda":
        torch.cuda.set_device(0)
    info = {"argv": sys.argv, "torch": torch.__version__, "nproc": args.nproc,
            "gpu": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if args.device == "cuda" else "cpu"}
    import temporalio

    info["temporalio"] = temporalio.__version__
    info["temporal_cli"] = subprocess.run([args.temporal, "--version"], capture_output=True, text=True).stdout.strip()
    server = start_temporal(args.temporal, port, work)
    flows = []
    try:
        for par in args.parallelism.split(","):
            flows.append(run_flow(args, par, address, work / par))
            out.write_text(json.dumps({**info, "flows": flows}, indent=1))
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(30)
    print(f"\n{'parallelism':12} {'status':7} {'recoveries':>10} {'wall s':>7}  adapter max|diff|  checks failed")
    for f in flows:
        bad = [k for k, v in f.get("checks", {}).items() if v is not True]
        print(f"{f['parallelism_asked']:12} {f['status']:7} {f.get('recoveries', '-')!s:>10} {f['wall_s']:7.1f}  "
              f"{f.get('adapter_max_abs_diff', '-')!s:16} {bad or f.get('error', '')[:300]}")
    return 0 if all(f["status"] == "pass" for f in flows) else 1


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--as-worker":
        worker_entry(sys.argv[2:])
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--temporal", required=True, help="the temporal CLI binary (server start-dev)")
    ap.add_argument("--port", type=int, default=0, help="the dev server's port (default: a free one)")
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--parallelism", default="auto", help="one job each: auto, replicate, fsdp, comma-separated")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--tiny", action="store_true", help="the tests' tiny model (CPU rehearsal)")
    ap.add_argument("--kill-rank", type=int, default=3)
    ap.add_argument("--oom-rank", type=int, default=2)
    ap.add_argument("--start-timeout", type=float, default=180)
    ap.add_argument("--work", default="/tmp")
    ap.add_argument("--out", default="worker-temporal.json")
    args = ap.parse_args()
    # A one-GPU job has only rank 0 to kill: the Temporal worker itself dies, as a lone trainer process does.
    lowest_kill = 0 if args.nproc == 1 else 1
    if not (lowest_kill <= args.kill_rank < args.nproc and 0 <= args.oom_rank < args.nproc):
        raise SystemExit(f"--kill-rank must be a follower rank ({lowest_kill}..{args.nproc - 1}; rank 0 only on one GPU) and "
                         f"--oom-rank a rank (0..{args.nproc - 1}). Fix: pass ranks below --nproc")
    raise SystemExit(driver(args))


if __name__ == "__main__":
    main()
