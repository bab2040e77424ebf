"""FSDP2 across 2 processes (gloo, CPU): the same step as a single process."""

import torch
import torch.multiprocessing as mp

import dist_worker
from helpers import make_cfg, make_samples
from ratchet_trainer.core import Trainer, write_batch


def test_two_ranks_give_the_single_process_loss_and_gradients(tmp_path):
    vocab = 256
    meta = {"run_id": "run", "step": 0, "vocab_size": vocab}
    refs = write_batch(tmp_path, "b", make_samples(vocab), meta)
    odd_refs = write_batch(tmp_path, "odd", make_samples(vocab, lengths=(16, 20, 12)), meta)

    single = dist_worker.run_step(Trainer("run", make_cfg("tiny", optim={"max_grad_norm": 0.0})), refs)

    out = tmp_path / "rank0.pt"
    mp.spawn(dist_worker.rank_main, args=(2, str(tmp_path / "init"), str(out), refs, odd_refs), nprocs=2, join=True)
    dual = torch.load(out, weights_only=False)

    assert dual["odd_error"] is not None and "3 samples, which 2 ranks cannot split evenly" in dual["odd_error"]
    assert dual["unchanged"]
    dist_worker.assert_same_step(single, dual, ("loss", "entropy", "clip_frac", "ratio_abs_dev", "tokens", "grad_norm"))


def test_a_pretrained_model_across_ranks_is_read_by_rank_0_alone_and_trains_as_one_process(tmp_path):
    """model.path under 2 ranks: every rank builds on the meta device and shards, rank 0 alone reads the
    weights and broadcasts them (a model larger than one GPU never lands whole on one). The step equals
    a single process that loaded the same directory with from_pretrained."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from helpers import TINY

    conf = dict(TINY)
    torch.manual_seed(123)  # weights unlike the seed-0 random init the trainer itself would draw
    AutoModelForCausalLM.from_config(AutoConfig.for_model(conf.pop("model_type"), **conf)).save_pretrained(tmp_path / "model")
    vocab = 256
    refs = write_batch(tmp_path, "b", make_samples(vocab), {"run_id": "run", "step": 0, "vocab_size": vocab})

    single = dist_worker.run_step(Trainer("run", dist_worker.pretrained_cfg(str(tmp_path / "model"))), refs)

    out = tmp_path / "rank0.pt"
    mp.spawn(dist_worker.rank_main_pretrained, args=(2, str(tmp_path / "init"), str(out), refs, str(tmp_path / "model")),
             nprocs=2, join=True)
    dual = torch.load(out, weights_only=False)

    assert dual["on_meta"] == []
    dist_worker.assert_same_step(single, dual)
