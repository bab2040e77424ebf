"""Step replay (ratchet_trainer/replay.py): a run trained through the worker's commands, then each
step replayed from its stored batch and the previous checkpoint on a fresh trainer must reproduce
the recorded adapter's sha256 bit for bit on the CPU; a changed batch must not."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ratchet_trainer.commands import TrainerCommands
from ratchet_trainer.core.batch import write_batch
from ratchet_trainer.replay import ReplayInputError, main, replay_step
from helpers import make_cfg, make_samples, on_policy_batch

STEPS = 3


def _advantages(step: int):
    return [(1.0, -1.0, 0.5, -0.5), (-0.5, 1.0, -1.0, 0.5), (0.25, 0.75, -1.0, -0.25)][step]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Three steps on one in-memory trainer, as a worker trains a run: load, then step + save per step."""
    root = tmp_path_factory.mktemp("artifacts")
    cmds = TrainerCommands(root, owner="test")
    # Dropout on: replay must also reproduce the step's seeded randomness.
    raw = make_cfg(lora={"rank": 8, "alpha": 16, "dropout": 0.1}).to_dict()
    cmds.load({"run_id": "r", "trainer_config": raw})
    records = []
    for s in range(STEPS):
        samples = make_samples(cmds.trainer.vocab_size, advantages=_advantages(s), seed=s)
        batch, manifest = on_policy_batch(cmds.trainer, root / "batches", samples, s, run_id="r")
        metrics, _ = cmds.step({"run_id": "r", "step": s, "batch": batch, "manifest": manifest})
        assert metrics["applied"]
        saved = cmds.save({"run_id": "r", "step": s})
        records.append({"step": s, "batch": batch, "manifest": manifest, "samples": samples, **saved})
    return root, records


def _request(records, s: int, **over):
    rec = records[s]
    return {"run_id": "r", "step": s, "batch": rec["batch"], "manifest": rec["manifest"],
            "checkpoint": rec["checkpoint"], "adapter": rec["adapter"],
            "parent_checkpoint": records[s - 1]["checkpoint"] if s > 0 else None, **over}


def test_every_step_replays_to_the_recorded_adapter_sha256(run):
    _, records = run
    shas = {r["adapter"]["sha256"] for r in records}
    assert len(shas) == STEPS  # each step moved the adapter: an unchanged adapter would "match" trivially
    for s in range(STEPS):
        out = replay_step(_request(records, s))
        assert out["adapter_sha256"] == records[s]["adapter"]["sha256"], out
        assert out["match"] and out["passed"]
        assert out["max_abs_diff"] == 0.0


def test_a_changed_batch_gives_another_adapter_and_the_command_says_so(run, tmp_path, capsys):
    root, records = run
    # Step 1's samples with one advantage flipped: a batch the step never trained on.
    samples = [dict(x) for x in records[1]["samples"]]
    samples[0]["advantage"] = -samples[0]["advantage"]
    meta = json.loads(Path(records[1]["manifest"]["uri"][len("file://"):]).read_text())
    batch, manifest = write_batch(tmp_path, "changed", [
        {**smp, "inference_logprobs": orig} for smp, orig in zip(samples, _inference_logprobs(records[1]))],
        {k: meta[k] for k in ("run_id", "step", "vocab_size", "seq_len") if k in meta})
    assert batch["sha256"] != records[1]["batch"]["sha256"]
    req = tmp_path / "req.json"
    req.write_text(json.dumps(_request(records, 1, batch=batch, manifest=manifest)))
    assert main(["--request", str(req)]) == 1
    out = capsys.readouterr()
    result = json.loads(out.out)
    assert not result["match"] and not result["passed"] and result["max_abs_diff"] > 0
    assert records[1]["adapter"]["sha256"] in out.err and result["adapter_sha256"] in out.err and "MISMATCH" in out.err
    # A tolerance above the difference passes it (the GPU comparison), one below does not.
    req.write_text(json.dumps(_request(records, 1, batch=batch, manifest=manifest, tolerance=result["max_rel_diff"] * 2)))
    assert main(["--request", str(req)]) == 0
    req.write_text(json.dumps(_request(records, 1, batch=batch, manifest=manifest, tolerance=result["max_rel_diff"] / 2)))
    assert main(["--request", str(req)]) == 1


def _inference_logprobs(rec):
    from ratchet_trainer.core.batch import load_batch

    b = load_batch(rec["batch"], rec["manifest"])
    off = b.sample_offsets.tolist()
    return [b.inference_logprobs[off[i]: off[i + 1]].tolist() for i in range(b.num_samples)]


def test_the_wrong_parent_is_refused(run):
    _, records = run
    with pytest.raises(ReplayInputError, match="not the checkpoint this step started from"):
        replay_step(_request(records, 1, parent_checkpoint=records[1]["checkpoint"]))


def test_the_wrong_parent_gives_a_mismatch_not_a_match(run):
    _, records = run
    # Step 2 from step 0's checkpoint (it skips step 1's update): a different adapter.
    out = replay_step(_request(records, 2, parent_checkpoint=records[0]["checkpoint"]))
    assert not out["match"] and not out["passed"]


def test_bad_requests_name_the_field(run, tmp_path, capsys):
    _, records = run
    with pytest.raises(ReplayInputError, match="`adapter` is missing"):
        replay_step({k: v for k, v in _request(records, 0).items() if k != "adapter"})
    with pytest.raises(ReplayInputError, match="is of step 0, not 1"):
        replay_step(_request(records, 1, checkpoint=records[0]["checkpoint"]))
    req = tmp_path / "req.json"
    req.write_text(json.dumps(_request(records, 0, tolerance=-1)))
    assert main(["--request", str(req)]) == 2
    assert "tolerance must be a number >= 0" in capsys.readouterr().err


def test_a_list_of_requests_replays_each_in_one_process_a_line_each(run, tmp_path, capsys):
    """`ratchet replay-step <run> all` sends every step at once: torch loads once, each step as if alone."""
    _, records = run
    req = tmp_path / "req.json"
    # Step 2 first and step 0 last: no replay may lean on what the process replayed before it.
    wrong_parent = _request(records, 2, parent_checkpoint=records[0]["checkpoint"])
    req.write_text(json.dumps([_request(records, 2), wrong_parent, _request(records, 0)]))
    assert main(["--request", str(req)]) == 1
    out = capsys.readouterr()
    lines = [json.loads(x) for x in out.out.strip().split("\n")]
    assert [(x["step"], x["passed"]) for x in lines] == [(2, True), (2, False), (0, True)]
    assert [x["adapter_sha256"] for x in (lines[0], lines[2])] == [records[2]["adapter"]["sha256"], records[0]["adapter"]["sha256"]]
    assert out.err.count("MISMATCH") == 1
    # A bad request ends the list where it stands: the results before it, then its error.
    req.write_text(json.dumps([_request(records, 0), _request(records, 1, tolerance=-1), _request(records, 2)]))
    assert main(["--request", str(req)]) == 2
    lines = [json.loads(x) for x in capsys.readouterr().out.strip().split("\n")]
    assert [x.get("step", x.get("error")) for x in lines] == [0, "ReplayInputError"]


@pytest.mark.parametrize("hash_seed", ["1", "2"])
def test_replay_in_another_process_matches(run, tmp_path, hash_seed):
    """Another process has another string hash seed: peft's set-valued adapter config must not change the
    adapter's bytes (checkpoint.canonical_adapter_config), or no replay outside the worker could match."""
    import os
    import subprocess
    import sys

    _, records = run
    req = tmp_path / "req.json"
    req.write_text(json.dumps(_request(records, 1)))
    p = subprocess.run([sys.executable, "-m", "ratchet_trainer.replay", "--request", str(req)], capture_output=True, text=True,
                       cwd=Path(__file__).parents[1], env={**os.environ, "PYTHONHASHSEED": hash_seed}, timeout=300)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["adapter_sha256"] == records[1]["adapter"]["sha256"]


def test_adapter_config_is_written_in_one_order(tmp_path):
    from ratchet_trainer.core.checkpoint import canonical_adapter_config

    (tmp_path / "adapter_config.json").write_text(json.dumps({"target_modules": ["v_proj", "q_proj"], "r": 8, "modules_to_save": None}))
    canonical_adapter_config(tmp_path)
    assert json.loads((tmp_path / "adapter_config.json").read_text()) == {"target_modules": ["q_proj", "v_proj"], "r": 8, "modules_to_save": None}


def test_an_adapter_written_before_the_canonical_config_replays_by_contents(run, tmp_path):
    """A pre-0.7 adapter: the same tensors, peft's sets in another order in adapter_config.json. Its sha256
    cannot be reproduced; the replay says the contents are the same (and still fails on other tensors)."""
    import shutil

    from ratchet_trainer.core.artifacts import MANIFEST, uri_to_path, write_manifest

    _, records = run
    old = tmp_path / "adapter"
    shutil.copytree(uri_to_path(records[1]["adapter"]["uri"]), old)
    (old / MANIFEST).unlink()
    cfg = json.loads((old / "adapter_config.json").read_text())
    cfg["target_modules"] = sorted(cfg["target_modules"], reverse=True)
    (old / "adapter_config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    ref = write_manifest(old)
    assert ref["sha256"] != records[1]["adapter"]["sha256"]
    out = replay_step(_request(records, 1, adapter=ref))
    assert not out["match"] and out["same_tensors"] and out["same_config"] and out["same_contents"] and out["passed"]
    out = replay_step(_request(records, 2, adapter=ref))  # another step's update: other tensors
    assert not out["same_tensors"] and not out["passed"]
