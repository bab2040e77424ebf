"""The Temporal worker against the real dev server (127.0.0.1:7233): a workflow drives
announce/load/step/save; the worker process is SIGKILLed in the middle of a step, a
new worker takes over from the last checkpoint, and the step's result matches an
uninterrupted run. Skipped loudly when no server is reachable (infra/temporal.sh start)."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ratchet_trainer.core import Trainer, load_batch
from ratchet_trainer.core.artifacts import uri_to_path
from helpers import REPO, assert_same_update, TEMPORAL_ADDRESS, make_cfg, make_samples, on_policy_batch, real_model_available, snapshot, temporal_reachable

pytestmark = pytest.mark.skipif(
    not temporal_reachable(),
    reason=f"SKIPPED LOUDLY: no Temporal server at {TEMPORAL_ADDRESS}; start it with `bash infra/temporal.sh start`",
)


def _worker(tmp: Path, name: str, shared_queue: str, env_extra: dict) -> tuple[subprocess.Popen, Path]:
    ready = tmp / f"{name}.ready"
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer"), **env_extra}
    log = open(tmp / f"{name}.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "ratchet_trainer.worker", "--address", TEMPORAL_ADDRESS,
                          "--artifacts", str(tmp / "art"), "--ready-file", str(ready), "--shared-queue", shared_queue],
                         env=env, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert p.poll() is None, (tmp / f"{name}.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "worker did not start"
        time.sleep(0.2)
    return p, ready


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _long_tests() -> bool:
    return os.environ.get("RATCHET_LONG_TESTS") == "1"


# The tiny model in CI: what this test proves is the workflow's recovery (the dead worker's step times out on its
# heartbeat, a new worker loads the last checkpoint and redoes the step). The real model's kill and retry from a
# checkpoint in a fresh process is test_recovery.py's [real] case, and faults.test.ts kills the real stack's trainer.
@pytest.mark.parametrize("kind", ["tiny", pytest.param("real", marks=pytest.mark.skipif(
    not _long_tests(), reason="SKIPPED LOUDLY: a long test (SmolLM2 in the worker, ~3 min): npm run test:long (RATCHET_LONG_TESTS=1)"))])
def test_worker_killed_mid_step_recovers_from_checkpoint(tmp_path, kind):
    from temporalio.client import Client
    from temporalio.worker import Worker
    from flow_wf import TrainerRecoveryTestFlow

    if kind == "real" and not real_model_available():
        pytest.skip("SKIPPED LOUDLY: the converted SmolLM2 model is missing (infra/convert_model.py)")
    cfg = make_cfg(kind, micro_batch_tokens=24)
    ref = Trainer("run", cfg)
    samples = make_samples(ref.vocab_size)
    b0 = on_policy_batch(ref, tmp_path, samples, 0)
    ref.step(0, load_batch(*b0))
    b1 = on_policy_batch(ref, tmp_path, samples, 1)
    want = ref.step(1, load_batch(*b1))
    want_w = snapshot(ref)
    del ref

    shared = f"ratchet-trainer-test-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "fault.marker"
    procs = []
    try:
        a, ready_a = _worker(tmp_path, "a", shared, {"RATCHET_TRAINER_FAULT_SLEEP_S": "60", "RATCHET_TRAINER_FAULT_STEP": "1",
                                                     "RATCHET_TRAINER_FAULT_MARKER": str(marker), "RATCHET_METRICS_PORT": "off"})
        metrics_port = _free_port()
        procs.append(a)

        async def drive():
            client = await Client.connect(TEMPORAL_ADDRESS)
            wf_queue = f"{shared}-wf"
            async with Worker(client, task_queue=wf_queue, workflows=[TrainerRecoveryTestFlow]):
                handle = await client.start_workflow(
                    TrainerRecoveryTestFlow.run,
                    {"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": [b0, b1],
                     # The killed worker's step fails on its heartbeat timeout: 5 s, not the flow's 60, is all the wait.
                     "step_heartbeat_timeout_s": 5, "liveness": {"heartbeat_every_s": 1}},
                    id=f"trainer-recovery-{uuid.uuid4().hex[:8]}", task_queue=wf_queue)
                deadline = time.monotonic() + 400
                while not marker.exists():
                    assert time.monotonic() < deadline, (tmp_path / "a.log").read_text()[-3000:]
                    await asyncio.sleep(0.2)
                a.send_signal(signal.SIGKILL)
                a.wait(30)
                b, _ = await asyncio.to_thread(_worker, tmp_path, "b", shared, {"RATCHET_METRICS_PORT": str(metrics_port)})
                procs.append(b)
                return await asyncio.wait_for(handle.result(), timeout=480)

        out = asyncio.run(drive())
        # The new trainer's Prometheus endpoint: Ratchet's counters beside the SDK's runtime metrics.
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        steps = [float(line.split()[-1]) for line in scraped.splitlines() if line.startswith("ratchet_trainer_steps_total")]
        assert steps and sum(steps) >= 1, scraped[-2000:]
        assert "ratchet_trainer_step_seconds" in scraped and "temporal_" in scraped
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                p.wait(30)

    assert out["recoveries"] == 1
    r0, r1 = out["results"]
    assert r0["queue"] == json.loads(ready_a.read_text())["task_queue"] and r1["queue"] != r0["queue"]
    assert r1["metrics"]["applied"] is True and r1["saved"]["policy_version"] == 2
    for key in ("loss", "entropy", "grad_norm", "tokens"):
        assert r1["metrics"][key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    adapter = load_file(str(uri_to_path(r1["saved"]["adapter"]["uri"]) / "adapter_model.safetensors"))
    for k, v in want_w.items():
        torch.testing.assert_close(adapter[k], v, rtol=1e-4, atol=1e-6)


def test_micro_batch_slower_than_the_heartbeat_timeout_does_not_fail_the_step(tmp_path):
    """The CPU stack's bug: one micro-batch took longer than the heartbeat timeout and the step was
    redone from scratch. The fault hook sleeps 15 s after a micro-batch without heartbeating from the
    step thread; the step's heartbeat timeout is 5 s. The timer heartbeats must carry it through on
    its first and only attempt (retry policy: once). Two micro-batches, so the hook sleeps once (it
    sleeps after every micro-batch but the first: four were 45 s of sleep proving the same)."""
    from temporalio.client import Client
    from temporalio.worker import Worker
    from flow_wf import TrainerRecoveryTestFlow

    cfg = make_cfg("tiny", micro_batch_tokens=40)
    ref = Trainer("run", cfg)
    b0 = on_policy_batch(ref, tmp_path, make_samples(ref.vocab_size), 0)
    del ref
    shared = f"ratchet-trainer-test-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "fault.marker"
    a, _ = _worker(tmp_path, "slow", shared, {"RATCHET_TRAINER_FAULT_SLEEP_S": "15", "RATCHET_TRAINER_FAULT_STEP": "0",
                                              "RATCHET_TRAINER_FAULT_MARKER": str(marker), "RATCHET_METRICS_PORT": "off"})
    try:
        async def drive():
            client = await Client.connect(TEMPORAL_ADDRESS)
            wf_queue = f"{shared}-wf"
            async with Worker(client, task_queue=wf_queue, workflows=[TrainerRecoveryTestFlow]):
                handle = await client.start_workflow(
                    TrainerRecoveryTestFlow.run,
                    {"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": [b0],
                     "step_heartbeat_timeout_s": 5, "liveness": {"heartbeat_every_s": 1, "stall_s": 60}},
                    id=f"trainer-slow-mb-{uuid.uuid4().hex[:8]}", task_queue=wf_queue)
                return await asyncio.wait_for(handle.result(), timeout=300)

        t0 = time.monotonic()
        out = asyncio.run(drive())
        took = time.monotonic() - t0
    finally:
        a.send_signal(signal.SIGTERM)
        a.wait(30)
    assert marker.exists(), "the fault hook never ran: the test proved nothing"
    assert json.loads(marker.read_text())["micro_batches"] == 2
    assert took > 15
    assert out["recoveries"] == 0, (tmp_path / "slow.log").read_text()[-3000:]
    assert out["results"][0]["metrics"]["applied"] is True


def _torchrun_worker(tmp: Path, name: str, shared_queue: str, env_extra: dict, nproc: int = 2) -> tuple[subprocess.Popen, dict]:
    """`torchrun --nproc-per-node <nproc> -m ratchet_trainer.worker` (gloo on the CPU): rank 0 polls Temporal."""
    ready = tmp / f"{name}.ready"
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer"), "RATCHET_METRICS_PORT": "off", **env_extra}
    log = open(tmp / f"{name}.log", "w")
    p = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(nproc),
                          "--master-addr", "127.0.0.1", "--master-port", str(_free_port()),
                          "-m", "ratchet_trainer.worker", "--address", TEMPORAL_ADDRESS, "--artifacts", str(tmp / "art"),
                          "--ready-file", str(ready), "--shared-queue", shared_queue],
                         env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 180
    while not ready.exists():
        assert p.poll() is None, (tmp / f"{name}.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "torchrun worker did not start"
        time.sleep(0.2)
    return p, json.loads(ready.read_text())


def test_torchrun_worker_rank_killed_mid_step_fails_the_step_and_the_retry_reloads_every_rank(tmp_path):
    """One trainer over two ranks: rank 0 is the Temporal worker, rank 1 mirrors it. Rank 1 is
    SIGKILLed while rank 0 is inside step 1: torchrun ends the job, the step fails as a whole on it, the
    workflow re-announces, a new two-rank job loads step 0's (sharded) checkpoint on both ranks and
    redoes step 1. Every result equals one process's uninterrupted run (computed here, independently)."""
    from temporalio.client import Client
    from temporalio.worker import Worker
    from flow_wf import TrainerRecoveryTestFlow

    cfg = make_cfg("tiny", micro_batch_tokens=24)
    ref = Trainer("run", cfg)
    samples = make_samples(ref.vocab_size)
    b0 = on_policy_batch(ref, tmp_path, samples, 0)
    want0 = ref.step(0, load_batch(*b0))
    b1 = on_policy_batch(ref, tmp_path, samples, 1)
    want1 = ref.step(1, load_batch(*b1))
    want_w = snapshot(ref)
    del ref

    shared = f"ratchet-trainer-test-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "fault.marker"
    procs: list[subprocess.Popen] = []
    try:
        a, ready_a = _torchrun_worker(tmp_path, "a", shared, {"RATCHET_TRAINER_FAULT_SLEEP_S": "60", "RATCHET_TRAINER_FAULT_STEP": "1",
                                                              "RATCHET_TRAINER_FAULT_MARKER": str(marker)})
        procs.append(a)
        assert ready_a["world_size"] == 2 and len(ready_a["rank_pids"]) == 2, ready_a

        async def drive():
            client = await Client.connect(TEMPORAL_ADDRESS)
            wf_queue = f"{shared}-wf"
            async with Worker(client, task_queue=wf_queue, workflows=[TrainerRecoveryTestFlow]):
                handle = await client.start_workflow(
                    TrainerRecoveryTestFlow.run,
                    {"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": [b0, b1],
                     "step_heartbeat_timeout_s": 5, "liveness": {"heartbeat_every_s": 1}},
                    id=f"trainer-ranks-{uuid.uuid4().hex[:8]}", task_queue=wf_queue)
                deadline = time.monotonic() + 400
                while not marker.exists():
                    assert time.monotonic() < deadline, (tmp_path / "a.log").read_text()[-3000:]
                    await asyncio.sleep(0.2)
                os.kill(ready_a["rank_pids"][1], signal.SIGKILL)  # rank 1, while rank 0 sleeps inside step 1
                exit_code = await asyncio.to_thread(a.wait, 120)  # torchrun stops rank 0 and ends the job
                b, ready_b = await asyncio.to_thread(_torchrun_worker, tmp_path, "b", shared, {})
                procs.append(b)
                return exit_code, ready_b, await asyncio.wait_for(handle.result(), timeout=480)

        exit_code, ready_b, out = asyncio.run(drive())
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
                p.wait(60)

    assert exit_code != 0, "the job went on without rank 1"
    assert out["recoveries"] == 1, (tmp_path / "b.log").read_text()[-3000:]
    r0, r1 = out["results"]
    assert r0["queue"] == ready_a["task_queue"] and r1["queue"] == ready_b["task_queue"] != r0["queue"]
    for want, got in ((want0, r0["metrics"]), (want1, r1["metrics"])):
        assert got["applied"] is True
        for key in ("loss", "entropy", "grad_norm", "tokens"):
            assert got[key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    ckpt = uri_to_path(r1["saved"]["checkpoint"]["uri"])
    assert json.loads((ckpt / "trainer_state.json").read_text()).get("world_size") == 2
    restored = [json.loads(line) for line in (tmp_path / "b.log").read_text().splitlines()
                if line.startswith("{") and '"checkpoint restored"' in line]
    assert len(restored) == 2 and {r["world_size"] for r in restored} == {2}, restored  # on both ranks of the new job
    adapter = load_file(str(uri_to_path(r1["saved"]["adapter"]["uri"]) / "adapter_model.safetensors"))
    assert_same_update(adapter, want_w, lr=cfg.optim.lr)


def _two_batches(tmp: Path):
    """The tiny model's config and two on-policy batches (steps 0 and 1) that the flows below train."""
    cfg = make_cfg("tiny", micro_batch_tokens=24)
    ref = Trainer("run", cfg)
    samples = make_samples(ref.vocab_size)
    return cfg, on_policy_batch(ref, tmp, samples, 0), on_policy_batch(ref, tmp, samples, 1)


def test_hung_but_alive_trainer_is_replaced_by_a_plain_restart_loop(tmp_path):
    """Issue 25: a trainer whose step thread hangs while the process stays alive is replaced with no
    Ratchet supervisor, only what systemd's Restart=always does: start the process again when it exits.
    The watchdog fires, the trainer fences itself (exit 75), the loop starts a new one, the workflow
    re-announces and the new trainer trains the step from the last checkpoint."""
    from temporalio.client import Client
    from temporalio.worker import Worker
    from flow_wf import TrainerRecoveryTestFlow
    from ratchet_trainer.liveness import EXIT_STALLED

    cfg, b0, b1 = _two_batches(tmp_path)
    shared = f"ratchet-trainer-test-{uuid.uuid4().hex[:8]}"
    marker, exits, ready = tmp_path / "fault.marker", tmp_path / "exits", tmp_path / "trainer.ready"
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer"), "RATCHET_METRICS_PORT": "off",
           "RATCHET_TRAINER_FAULT_SLEEP_S": "600", "RATCHET_TRAINER_FAULT_STEP": "1",
           "RATCHET_TRAINER_FAULT_MARKER": str(marker), "RATCHET_TRAINER_FAULT_ONCE": "1"}
    worker = (f"'{sys.executable}' -m ratchet_trainer.worker --address {TEMPORAL_ADDRESS} --artifacts '{tmp_path / 'art'}' "
              f"--ready-file '{ready}' --shared-queue {shared}")
    # Restart=always, as a shell loop: every exit, whatever its status, starts the trainer again.
    loop = subprocess.Popen(["bash", "-c", f"while true; do {worker}; echo $? >> '{exits}'; sleep 1; done"],
                            env=env, stdout=open(tmp_path / "trainer.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert loop.poll() is None and time.monotonic() < deadline, (tmp_path / "trainer.log").read_text()[-3000:]
            time.sleep(0.2)

        async def drive():
            client = await Client.connect(TEMPORAL_ADDRESS)
            wf_queue = f"{shared}-wf"
            async with Worker(client, task_queue=wf_queue, workflows=[TrainerRecoveryTestFlow]):
                handle = await client.start_workflow(
                    TrainerRecoveryTestFlow.run,
                    {"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": [b0, b1],
                     "step_heartbeat_timeout_s": 10, "liveness": {"heartbeat_every_s": 1, "stall_s": 5}},
                    id=f"trainer-fence-{uuid.uuid4().hex[:8]}", task_queue=wf_queue)
                return await asyncio.wait_for(handle.result(), timeout=300)

        out = asyncio.run(drive())
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(30)
    log = (tmp_path / "trainer.log").read_text()
    assert marker.exists(), log[-3000:]
    assert exits.read_text().split()[0] == str(EXIT_STALLED), log[-3000:]
    assert "fences itself" in log
    assert out["recoveries"] == 1
    r0, r1 = out["results"]
    assert r1["queue"] != r0["queue"] and r1["metrics"]["applied"] is True and r1["saved"]["policy_version"] == 2


def _restart_loop(tmp: Path, shared: str, env_extra: dict) -> tuple[subprocess.Popen, Path, Path]:
    """The trainer under a plain restart loop (systemd's Restart=always): every exit appends its status to `exits`."""
    exits, ready = tmp / "exits", tmp / "trainer.ready"
    env = {**os.environ, "PYTHONPATH": str(REPO / "trainer"), "RATCHET_METRICS_PORT": "off", **env_extra}
    worker = (f"'{sys.executable}' -m ratchet_trainer.worker --address {TEMPORAL_ADDRESS} --artifacts '{tmp / 'art'}' "
              f"--ready-file '{ready}' --shared-queue {shared}")
    loop = subprocess.Popen(["bash", "-c", f"while true; do {worker}; echo $? >> '{exits}'; sleep 1; done"],
                            env=env, stdout=open(tmp / "trainer.log", "w"), stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while not ready.exists():
        assert loop.poll() is None and time.monotonic() < deadline, (tmp / "trainer.log").read_text()[-3000:]
        time.sleep(0.2)
    return loop, exits, ready


def _drive(flow_input: dict, wf_id: str, timeout_s: float = 300) -> dict:
    from temporalio.client import Client
    from temporalio.worker import Worker
    from flow_wf import TrainerRecoveryTestFlow

    async def drive():
        client = await Client.connect(TEMPORAL_ADDRESS)
        wf_queue = f"{flow_input['shared_queue']}-wf"
        async with Worker(client, task_queue=wf_queue, workflows=[TrainerRecoveryTestFlow]):
            handle = await client.start_workflow(TrainerRecoveryTestFlow.run, flow_input, id=f"{wf_id}-{uuid.uuid4().hex[:8]}",
                                                 task_queue=wf_queue)
            return await asyncio.wait_for(handle.result(), timeout=timeout_s)

    return asyncio.run(drive())


def test_untyped_cuda_style_error_fences_the_trainer_and_the_step_trains_on_its_replacement(tmp_path):
    """Issue 39, hole 3: a RuntimeError as torch raises for a CUDA or NCCL error, in the middle of step 1. Before,
    the SDK retried it on the same (possibly poisoned) process and the run failed after two attempts. Now the
    activity fails as TrainerFault naming the error class and the worker, the process exits with EXIT_FAULTED,
    the restart loop starts a new one, and step 1 trains there from step 0's checkpoint, once."""
    from ratchet_trainer.liveness import EXIT_FAULTED

    cfg, b0, b1 = _two_batches(tmp_path)
    shared = f"ratchet-trainer-test-{uuid.uuid4().hex[:8]}"
    marker = tmp_path / "fault.marker"
    loop, exits, ready = _restart_loop(tmp_path, shared, {
        "RATCHET_TRAINER_FAULT_RAISE": "CUDA error: an illegal memory access was encountered", "RATCHET_TRAINER_FAULT_STEP": "1",
        "RATCHET_TRAINER_FAULT_MARKER": str(marker), "RATCHET_TRAINER_FAULT_ONCE": "1"})
    first = json.loads(ready.read_text())
    try:
        out = _drive({"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": [b0, b1]}, "trainer-fault")
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(30)
    log = (tmp_path / "trainer.log").read_text()
    assert marker.exists(), "the fault hook never ran: the test proved nothing"
    assert out["failures"] == [{"step": 1, "type": "TrainerFault",
                                "details": [{"error_class": "RuntimeError", "worker_id": first["worker_id"], "activity": "trainer.step"}]}], log[-3000:]
    assert exits.read_text().split()[0] == str(EXIT_FAULTED), log[-3000:]
    assert "process fault" in log and "illegal memory access" in log
    r0, r1 = out["results"]
    assert r0["queue"] == first["task_queue"] != r1["queue"]
    assert r1["metrics"]["applied"] is True and r1["saved"]["policy_version"] == 2


def test_slow_checkpoint_save_beats_with_bytes_and_is_not_fenced(tmp_path):
    """Issue 39, hole 7: a save slower than the stall window (a slow disk: every large read of the checkpoint's
    files sleeps 0.4 s, ~10 s a save; stall window 3 s). Before, the save reported nothing while it hashed and
    copied, and its watchdog fenced the trainer on every try. Now each chunk it copies is progress, with the
    bytes so far: both saves finish on their first attempt, no restart."""
    cfg, b0, b1 = _two_batches(tmp_path)
    shared = f"ratchet-trainer-test-{uuid.uuid4().hex[:8]}"
    loop, exits, _ = _restart_loop(tmp_path, shared, {
        "PYTHONPATH": f"{Path(__file__).parent / 'slow_disk'}{os.pathsep}{REPO / 'trainer'}",
        "RATCHET_TEST_SLOW_READ_UNDER": "/checkpoints/", "RATCHET_TEST_SLOW_READ_S": "0.4"})
    try:
        t0 = time.monotonic()
        out = _drive({"shared_queue": shared, "run_id": "run", "trainer_config": cfg.to_dict(), "batches": [b0, b1],
                      "step_heartbeat_timeout_s": 5, "liveness": {"heartbeat_every_s": 1, "stall_s": 3}}, "trainer-slow-save")
        took = time.monotonic() - t0
    finally:
        os.killpg(loop.pid, signal.SIGTERM)
        loop.wait(30)
    log = (tmp_path / "trainer.log").read_text()
    assert out["recoveries"] == 0 and not exits.exists(), log[-3000:]
    assert took > 2 * 3, f"the saves took {took:.1f} s in all: not slower than the stall window, the test proved nothing"
    assert [r["saved"]["policy_version"] for r in out["results"]] == [1, 2]
