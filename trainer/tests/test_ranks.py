"""Rank 0 leads, rank 1 follows (ranks.py, commands.py): two gloo processes on the CPU run the
trainer's calls in lockstep and train exactly as one process does; a call that fails on one rank
only fails on every rank, names that rank, applies nothing, and the retry goes through."""

import json

import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

import ranks_worker
from helpers import assert_same_update, make_cfg, make_samples
from ratchet_trainer.core import Trainer, load_batch, write_batch
from ratchet_trainer.core.artifacts import uri_to_path


def test_follower_mirrors_rank_0_and_a_one_rank_failure_fails_the_call_everywhere(tmp_path):
    vocab = 256
    meta = {"run_id": "run", "vocab_size": vocab}
    b0 = write_batch(tmp_path, "b0", make_samples(vocab, seed=0), {**meta, "step": 0})
    b1 = write_batch(tmp_path, "b1", make_samples(vocab, seed=1), {**meta, "step": 1})

    single = Trainer("run", make_cfg("tiny", optim={"max_grad_norm": 0.0}))  # the independent computation
    want0 = single.step(0, load_batch(*b0))
    want1 = single.step(1, load_batch(*b1))
    want_state = {k: v.detach().clone() for k, v in single.trainable_state().items()}

    out = tmp_path / "rank0.pt"
    mp.spawn(ranks_worker.rank_main, args=(2, str(tmp_path / "init"), str(out), str(tmp_path / "art"), b0, b1), nprocs=2, join=True)
    got = torch.load(out, weights_only=False)

    failed = got["rank_failed"]
    assert failed is not None, "rank 1's store failure did not fail the step on rank 0"
    assert failed["type"] == "StoreUnavailable" and "rank 1: StoreUnavailable" in failed["message"], failed
    assert got["ledger_after_failure"] == [0], "the failed step was applied somewhere"
    for want, m in ((want0, got["m0"]), (want1, got["m1"])):
        assert m["applied"] is True
        for k in ("loss", "grad_norm", "tokens"):
            assert abs(want[k] - m[k]) <= 1e-5 * max(1.0, abs(want[k])), (k, want[k], m[k])
    # The checkpoint the two ranks saved together: sharded, and rank 0's whole adapter is the single process's.
    ckpt = uri_to_path(got["saved"]["checkpoint"]["uri"])
    assert json.loads((ckpt / "trainer_state.json").read_text())["world_size"] == 2
    adapter = load_file(str(uri_to_path(got["saved"]["adapter"]["uri"]) / "adapter_model.safetensors"))
    assert_same_update(adapter, want_state, lr=single.cfg.optim.lr)
