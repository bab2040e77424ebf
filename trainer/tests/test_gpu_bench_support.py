"""CPU tests of what the GPU tooling relies on: the compile watch (a recompile-limit fallback is
loud), the first layer's input requiring grad under compile, and rl_batches.py's batches."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import torch

from ratchet_trainer.core import model as model_mod
from ratchet_trainer.core.artifacts import path_to_uri, sha256_file
from ratchet_trainer.core.batch import load_batch
from ratchet_trainer.core.config import parse_trainer_config

from helpers import TINY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))


def _model():
    cfg = parse_trainer_config({"model": {"config": TINY, "lora": {"rank": 2}}, "device": "cpu"})
    return model_mod.build_model(cfg, torch.device("cpu"), "sdpa")


def test_compile_is_off_by_default_everywhere():
    cfg = parse_trainer_config({"model": {"config": TINY}})
    assert cfg.model.compile is False


def test_a_recompile_limit_fallback_is_counted_and_logged_as_an_error(caplog):
    m = _model()
    model_mod.compile_layers(m)  # lazy: nothing compiles until a forward
    try:
        before = model_mod.compile_stats()["compile_limit_hits"]
        with caplog.at_level(logging.WARNING):
            logging.getLogger("torch._dynamo.convert_frame").warning(
                "torch._dynamo hit config.%s (%s)\n   function: 'forward'\n   last reason: 0/7: hidden_states requires_grad mismatch",
                "recompile_limit", 8)
        assert model_mod.compile_stats()["compile_limit_hits"] == before + 1
        errors = [r for r in caplog.records if r.levelno == logging.ERROR and r.name == "ratchet_trainer.core.model"]
        assert errors and "EAGER" in errors[-1].getMessage()
        assert "requires_grad mismatch" in model_mod.COMPILE_WATCH.last_reason
    finally:
        model_mod.uncompile_layers(m)


def test_compiled_layers_all_get_an_input_that_requires_grad():
    m = _model()
    emb = m.get_input_embeddings()
    ids = torch.tensor([[1, 2, 3]])
    assert not emb(ids).requires_grad  # frozen embedding (LoRA): layer 0's input would differ from the rest
    model_mod.compile_layers(m)
    try:
        assert emb(ids).requires_grad
        with torch.no_grad():
            assert not emb(ids).requires_grad  # inference calls stay as they were
    finally:
        model_mod.uncompile_layers(m)
    assert not emb(ids).requires_grad


def test_rl_batches_have_the_shapes_of_real_rl_batches(tmp_path):
    from rl_batches import write_rl_batches

    paths = write_rl_batches(tmp_path, 3, seq=512, vocab=256, tasks=4, rollouts=4, drop=0.2, template="mixed")
    split = dropped = 0
    lengths: set[int] = set()
    for p in paths:
        ref = lambda f: {"uri": path_to_uri(f), "sha256": sha256_file(f), "bytes": f.stat().st_size}  # noqa: E731
        b = load_batch(ref(p), ref(p.with_suffix(".json")))
        traj = b.trajectories()
        assert int(traj.max()) + 1 == b.manifest["num_trajectories"]
        split += int((traj[1:] == traj[:-1]).sum())  # several samples of one trajectory
        dropped += sum(b.manifest["dropped"].values())
        lengths.update(b.sample_lengths())
        assert max(b.sample_lengths()) <= 512
    assert split > 0 and dropped > 0 and len(lengths) > 10


def test_memory_peak_finds_what_is_live_at_the_peak_of_an_allocator_trace():
    """memory_peak.py replays the allocator's trace: the peak is the largest sum of live blocks
    (plus what was allocated before recording), grouped by the innermost frame in our code."""
    import memory_peak

    ours = [{"filename": "/x/site-packages/transformers/models/qwen3/modeling_qwen3.py", "line": 322, "name": "forward"}]
    logits = [{"filename": "/x/torch/nn/functional.py", "line": 1, "name": "linear"},
              {"filename": "/r/trainer/ratchet_trainer/core/logprobs.py", "line": 115, "name": "backward"}]
    trace = [
        {"action": "alloc", "addr": 1, "size": 100, "frames": ours},
        {"action": "alloc", "addr": 2, "size": 300, "frames": logits},
        {"action": "free_requested", "addr": 2, "size": 300},
        {"action": "alloc", "addr": 3, "size": 250, "frames": logits},  # 350 live: below the 400 peak
        {"action": "free_requested", "addr": 1, "size": 100},
    ]
    peak, groups = memory_peak.live_at_peak({"device_traces": [trace]}, base_bytes=1000)
    assert peak == 1400
    assert groups == {"core/logprobs.py:115 backward  <- linear": 300,
                      "transformers/models/qwen3/modeling_qwen3.py:322 forward": 100}
