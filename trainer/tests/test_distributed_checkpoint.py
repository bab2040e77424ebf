"""Sharded checkpoints across world sizes (gloo, CPU, 2 processes): a 2-rank checkpoint resumes
in one process, a single-process one under 2 ranks, each giving the uninterrupted run's next
step; a sharded checkpoint of another adapter fails clearly with the trainer unchanged."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
import torch.multiprocessing as mp
from safetensors.torch import load_file

import dist_ckpt_worker
from helpers import assert_same_update, make_cfg, make_samples, snapshot
from ratchet_trainer.core import CheckpointError, Trainer, restore_checkpoint, save_checkpoint, write_batch
from ratchet_trainer.core.artifacts import dir_ref, uri_to_path, write_manifest
from ratchet_trainer.core.batch import load_batch

VOCAB = 256
# Another world size sums the same gradients in another order (see test_distributed.py): the
# last bits differ, so across world sizes weights compare within fp32 rounding; at the same world
# size a resume is bit-exact.
TOL = dict(rtol=1e-5, atol=5e-7)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dcp")
    refs0 = write_batch(tmp, "b0", make_samples(VOCAB), {"run_id": "run", "step": 0, "vocab_size": VOCAB})
    refs1 = write_batch(tmp, "b1", make_samples(VOCAB, seed=1), {"run_id": "run", "step": 1, "vocab_size": VOCAB})
    # Step 0 of a run started from "run"'s checkpoint ([model] init_from).
    refs_warm = write_batch(tmp, "bw", make_samples(VOCAB, seed=1), {"run_id": "warm", "step": 0, "vocab_size": VOCAB})

    single = Trainer("run", dist_ckpt_worker.cfg())
    single.step(0, load_batch(*refs0))
    single_ckpt = save_checkpoint(single, tmp / "single", 0)["checkpoint"]
    single_step1 = single.step(1, load_batch(*refs1))
    single_state1 = snapshot(single)

    out = tmp / "rank0.pt"
    mp.spawn(dist_ckpt_worker.rank_main, nprocs=2, join=True,
             args=(2, str(tmp / "init"), str(out), str(tmp / "ranks"), refs0, refs1, single_ckpt, refs_warm))
    return {"refs0": refs0, "refs1": refs1, "refs_warm": refs_warm, "single_step1": single_step1, "single_state1": single_state1,
            "dual": torch.load(out, weights_only=False), "tmp": tmp}


def assert_states_close(got, want, **tol):
    assert got.keys() == want.keys() and want
    for k, v in want.items():
        if tol:
            torch.testing.assert_close(got[k], v, **tol)
        else:
            assert torch.equal(got[k], v), k


def test_a_sharded_two_rank_checkpoint_resumes_in_one_process(runs):
    dual = runs["dual"]
    ckpt = dual["ckpt"]["checkpoint"]
    root = uri_to_path(ckpt["uri"])
    state = json.loads((root / "trainer_state.json").read_text())
    assert state["sharded"] is True and state["world_size"] == 2
    assert (root / "sharded" / ".metadata").is_file() and not (root / "optimizer.pt").exists()
    assert sorted(p.name for p in (root / "sharded").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    # Rank 0 wrote the whole adapter (vLLM's input): the 2 ranks' gathered step-0 weights.
    adapter = load_file(str(root / "adapter" / "adapter_model.safetensors"))
    tr = Trainer("run", dist_ckpt_worker.cfg())

    restore_checkpoint(tr, ckpt)
    assert sorted(tr.ledger) == [0] and tr.optimizer_steps == 1
    assert_states_close(snapshot(tr), dual["state0"])  # bit-exact: the same fp32 values, resharded
    assert_states_close(adapter, snapshot(tr))
    for got, want in zip(dist_ckpt_worker.optim_state(tr), dual["optim0"], strict=True):
        assert got.keys() == want.keys() and {"exp_avg", "exp_avg_sq", "step"} <= got.keys()
        for k in want:
            assert torch.equal(got[k], want[k]), k

    step1 = tr.step(1, load_batch(*runs["refs1"]))
    assert_states_close(snapshot(tr), dual["state1"], **TOL)
    assert step1["loss"] == pytest.approx(dual["step1"]["loss"], rel=1e-5)
    # Two fresh ranks resuming the same checkpoint: exactly the uninterrupted run.
    assert_states_close(dual["resumed_state1"], dual["state1"])
    assert dual["resumed_step1"]["loss"] == dual["step1"]["loss"]


def test_b_single_process_checkpoint_resumes_under_two_ranks(runs):
    dual = runs["dual"]
    assert dual["whole_restored"] == {"ledger": [0], "optimizer_steps": 1}
    assert dual["whole_step1"]["loss"] == pytest.approx(runs["single_step1"]["loss"], rel=1e-5)
    assert_states_close(dual["whole_state1"], runs["single_state1"], **TOL)


def _refresh_manifests(root: Path) -> dict:
    write_manifest(root / "adapter")
    write_manifest(root)
    return dir_ref(root)


def test_c_sharded_checkpoint_of_another_adapter_fails_before_any_change(runs, tmp_path):
    other = runs["dual"]["other_ckpt"]["checkpoint"]
    tr = Trainer("run", dist_ckpt_worker.cfg())  # LoRA rank 8; the checkpoint is rank 4
    before = snapshot(tr)
    with pytest.raises(CheckpointError, match="another model or adapter layout") as e:
        restore_checkpoint(tr, other)
    assert other["uri"] in str(e.value)

    # Shards that do not fit even where trainer_state.json claims they do (as if the fingerprint
    # missed what changed): the DCP metadata is compared with the model before any load.
    copy = tmp_path / "copy"
    shutil.copytree(uri_to_path(other["uri"]), copy)
    st = json.loads((copy / "trainer_state.json").read_text())
    st["model_fingerprint"] = tr.cfg.model_fingerprint()
    (copy / "trainer_state.json").write_text(json.dumps(st))
    ref = _refresh_manifests(copy)
    with pytest.raises(CheckpointError) as e:
        restore_checkpoint(tr, ref)
    msg = str(e.value)
    assert ref["uri"] in msg and "Fix:" in msg, msg
    assert re.search(r"sharded tensor \S+lora_A\S+ has shape \[4, \d+\], this model's has \[8, \d+\]", msg), msg

    assert tr.ledger == {} and tr.optimizer_steps == 0 and not tr.optimizer.state
    assert_states_close(snapshot(tr), before)


def test_a_sharded_checkpoint_loads_into_one_process_with_fp32_masters(runs):
    """One bf16 process (fp32 masters outside the model): the masters and their optimiser state
    are the 2 ranks' fp32 values exactly, the bf16 copies their rounding."""
    dual = runs["dual"]
    tr = Trainer("run", make_cfg("tiny", optim={"max_grad_norm": 0.0}, model={"dtype": "bfloat16"}))
    assert tr.master is not None
    restore_checkpoint(tr, dual["ckpt"]["checkpoint"])
    assert_states_close(snapshot(tr), dual["state0"])  # trainable_state reads the masters
    for p, m in zip(tr.master.params, tr.master.masters):
        assert p.dtype == torch.bfloat16 and torch.equal(p.detach(), m.detach().to(torch.bfloat16))
    got = [{k: v.clone() for k, v in tr.optimizer.state[m].items()} for m in tr.master.masters]
    for g, want in zip(got, dual["optim0"], strict=True):
        assert g.keys() == want.keys()
        for k in want:
            assert torch.equal(g[k], want[k]), k


def test_d_init_from_loads_a_whole_adapter_into_two_ranks_shards(runs):
    """[model] init_from under 2 ranks: each rank keeps its shards of the saved adapter; the gathered
    weights are the adapter file's, the ledger is fresh, and its step 0 equals one process's step from the same init."""
    from ratchet_trainer.core.init_adapter import load_init_adapter, prepare_init

    dual = runs["dual"]
    assert dual["init_ledger"] == []
    # One process, the same init: the independent reference.
    root = runs["tmp"] / "single" / "runs" / "run" / "checkpoints"
    ckpt_dir = next(p for p in root.iterdir() if p.name.startswith("step-0"))
    init = {"from": "run", "run_id": "run", "step": 0, "checkpoint": dir_ref(ckpt_dir), "adapter": dir_ref(ckpt_dir / "adapter")}
    one = Trainer("warm", dist_ckpt_worker.cfg())
    load_init_adapter(one, prepare_init(init, one.cfg, None))
    adapter = load_file(str(ckpt_dir / "adapter" / "adapter_model.safetensors"))
    assert_states_close(dual["init_state"], adapter)
    assert_states_close(snapshot(one), adapter)
    step = one.step(0, load_batch(*runs["refs_warm"]))
    assert dual["init_step0"]["loss"] == pytest.approx(step["loss"], rel=1e-5)
    # Another world size sums the gradients in another order: AdamW's near-zero elements (helpers.assert_same_update).
    assert_same_update(dual["init_state_after"], snapshot(one), one.cfg.optim.lr)
