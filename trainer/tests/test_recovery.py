"""Recovery: kill a real trainer process in the middle of a step; the retried step,
on a fresh process that loads the last checkpoint, gives the uninterrupted result."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from ratchet_trainer.core import Trainer, load_batch, save_checkpoint
from ratchet_trainer.core.artifacts import uri_to_path
from helpers import REPO, make_cfg, make_samples, on_policy_batch, real_model_available, snapshot

HERE = Path(__file__).resolve().parent


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "trainer"), str(HERE), env.get("PYTHONPATH", "")])
    return env


def _spawn(job: dict, path: Path) -> subprocess.Popen:
    path.write_text(json.dumps(job))
    return subprocess.Popen([sys.executable, str(HERE / "proc_step.py"), "--job", str(path)], env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


# Both kinds prove the same recovery; the real model (its checkpoint files, several micro-batches of a 135M
# model) is the stronger, so CI runs it and the tiny one is long, unless the real model is missing here.
_TINY_IS_LONG = os.environ.get("RATCHET_LONG_TESTS") != "1" and real_model_available()


@pytest.mark.parametrize("kind", [pytest.param("tiny", marks=pytest.mark.skipif(
    _TINY_IS_LONG, reason="SKIPPED LOUDLY: a long test (CI runs [real]): npm run test:long (RATCHET_LONG_TESTS=1)")), "real"])
def test_killed_mid_step_then_retried_from_checkpoint_matches_uninterrupted(kind, tmp_path):
    cfg = make_cfg(kind, micro_batch_tokens=24)  # several micro-batches, so a kill lands inside the step
    raw = cfg.to_dict()
    art = tmp_path / "art"
    ref = Trainer("run", cfg)
    samples = make_samples(ref.vocab_size)
    b0 = on_policy_batch(ref, tmp_path, samples, 0)
    ref.step(0, load_batch(*b0))
    ckpt0 = save_checkpoint(ref, art, 0)["checkpoint"]
    before_w = snapshot(ref)
    b1 = on_policy_batch(ref, tmp_path, samples, 1)
    want = ref.step(1, load_batch(*b1))
    want_w = snapshot(ref)
    del ref

    job = {"run_id": "run", "trainer_config": raw, "checkpoint": ckpt0, "step": 1, "batch": b1[0], "manifest": b1[1],
           "artifacts": str(art), "marker": str(tmp_path / "marker"), "out": str(tmp_path / "out.json")}
    victim = _spawn({**job, "sleep": 60}, tmp_path / "job1.json")
    deadline = time.monotonic() + 120
    while not (tmp_path / "marker").exists():
        assert victim.poll() is None, victim.stdout.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the trainer process never reached its first micro-batch"
        time.sleep(0.1)
    progress = json.loads((tmp_path / "marker").read_text())
    assert 0 < progress["micro_batch"] < progress["micro_batches"], "kill must land inside the step"
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    assert not (art / "runs/run/checkpoints/step-1").exists() and not (tmp_path / "out.json").exists()

    retry = _spawn(job, tmp_path / "job2.json")
    out, _ = retry.communicate(timeout=300)
    assert retry.returncode == 0, out.decode()[-3000:]
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["metrics"]["applied"] is True
    for key in ("loss", "entropy", "grad_norm", "mismatch_kl", "tokens"):
        assert got["metrics"][key] == pytest.approx(want[key], rel=1e-4, abs=1e-6), key
    adapter = load_file(str(uri_to_path(got["refs"]["adapter"]["uri"]) / "adapter_model.safetensors"))
    assert len(adapter) == len(want_w)
    # The retry runs in another process (other thread count, other reduction order), so float
    # sums differ in the last bits, and Adam turns a last-bit change of a near-zero gradient into
    # a visible change of that one element's update (CI saw 6e-5 on one of 4,608). So compare
    # step 1's update as a whole: a lost or doubled step is off by ~100%, reordering by far <1%.
    for k, v in want_w.items():
        want_delta, got_delta = v - before_w[k], adapter[k] - before_w[k]
        rel = float((got_delta - want_delta).norm() / want_delta.norm().clamp_min(1e-12))
        assert rel < 1e-2, f"{k}: the retried step's update differs by {rel:.2%} from the uninterrupted one"
        assert float((got_delta - want_delta).abs().max()) < 0.5 * cfg.optim.lr, k
