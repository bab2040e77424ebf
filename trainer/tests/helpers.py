"""Shared test helpers: tiny/real model configs and on-policy batches."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from ratchet_trainer.core import Trainer, parse_trainer_config, write_batch
from ratchet_trainer.core.batch import load_batch

REPO = Path(__file__).resolve().parents[2]
REAL_MODEL = Path(os.environ.get("RATCHET_HOME", REPO / ".ratchet")) / "models" / "SmolLM2-135M-Instruct"
TEMPORAL_ADDRESS = os.environ.get("TEMPORAL_ADDRESS", "127.0.0.1:7233")

TINY = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 256, "tie_word_embeddings": True}


def real_model_available() -> bool:
    return (REAL_MODEL / "config.json").is_file()


def model_section(kind: str) -> dict[str, Any]:
    if kind == "real":
        if not real_model_available():
            pytest.skip(f"SKIPPED LOUDLY: converted model missing at {REAL_MODEL} "
                        "(made by infra/convert_model.py); this integration test needs SmolLM2-135M-Instruct")
        return {"path": str(REAL_MODEL)}
    return {"config": TINY}


def make_cfg(kind: str = "tiny", **over: Any):
    raw: dict[str, Any] = {
        "model": model_section(kind),
        "lora": {"rank": 8, "alpha": 16, "dropout": 0.0},
        "ac": {"freq": 1},
        "optim": {"lr": 5e-3 if kind == "tiny" else 2e-3, "weight_decay": 0.0},
        # Clip ranges: the loss kind's defaults. The tests' expected numbers were written for "token".
        "loss": {"normalization": "token"},
        "seq_len": 64,
        "micro_batch_tokens": 64,
        "device": "cpu",
        "seed": 0,
    }
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(raw.get(k), dict):
            raw[k] = {**raw[k], **v}
        else:
            raw[k] = v
    return parse_trainer_config(raw)


def vocab_of(trainer: Trainer) -> int:
    return trainer.vocab_size


def make_samples(vocab: int, lengths=(16, 20, 12, 18), prompt=6, advantages=(1.0, -1.0, 0.5, -0.5), seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for n, a in zip(lengths, advantages):
        ids = torch.randint(1, min(vocab, 5000), (n,), generator=g).tolist()
        out.append({"input_ids": ids, "loss_mask": [0] * prompt + [1] * (n - prompt), "advantage": a,
                    "inference_logprobs": [0.0] * n})
    return out


def on_policy_batch(trainer: Trainer, tmp: Path, samples, step: int, name: str | None = None, run_id: str = "run"):
    """Write samples with the trainer's own current logprobs as the inference logprobs."""
    name = name or f"batch-{step}"
    meta = {"run_id": run_id, "step": step, "vocab_size": trainer.vocab_size, "seq_len": trainer.cfg.seq_len}
    b, m = write_batch(tmp, name, samples, meta)
    lps = trainer.sample_logprobs(load_batch(b, m))
    samples = [{**s, "inference_logprobs": lp.tolist()} for s, lp in zip(samples, lps)]
    return write_batch(tmp, name, samples, meta)


def temporal_reachable() -> bool:
    host, port = TEMPORAL_ADDRESS.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


def snapshot(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.trainable_state().items()}


def assert_same_update(got: dict, want: dict, lr: float) -> None:
    """An adapter trained on several ranks equals one process's, up to what summation order can cause.

    Ranks sum their gradients in another order than one process. AdamW divides by sqrt(v), so a
    last-bit difference in a near-zero gradient element moves that element's update by a share of lr
    (seen: 7e-7 and 3e-6 on 1 of 512, 2e-5 on 1 of 1024 in CI, with lr 5e-3). A step missed or applied
    twice moves nearly every element by ~lr: at most 1% of elements may differ past 1e-5, none past lr/10.
    """
    assert got.keys() == want.keys()
    for k, v in want.items():
        diff = (got[k].float() - v.float()).abs()
        assert float(diff.max()) < 0.1 * lr, (k, float(diff.max()))
        assert float((diff > 1e-5).float().mean()) <= 0.01, (k, int((diff > 1e-5).sum()), diff.numel())


def wait_for(cond, timeout_s: float = 10.0, every_s: float = 0.01) -> bool:
    """Polls `cond` until true or `timeout_s`: these tests share 2 cores with the integration suite in CI, where a
    thread can wait hundreds of milliseconds for a core, so they judge events against each other, never a fixed sleep."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(every_s)
    return True
