"""The trainer's code version for a step's lineage (ratchet_trainer/code_version.py): a sha256 over the
package's Python sources that follows their contents, and trainer.save reports it."""

from __future__ import annotations

import hashlib
import shutil

from ratchet_trainer.code_version import PACKAGE, code_version, sources_sha256
from ratchet_trainer.commands import TrainerCommands
from helpers import make_cfg, make_samples, on_policy_batch


def test_the_sources_sha256_follows_every_source_and_nothing_else(tmp_path):
    pkg = tmp_path / "ratchet_trainer"
    shutil.copytree(PACKAGE, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    base = sources_sha256(pkg)
    assert base == sources_sha256(PACKAGE) and len(base) == 64
    (pkg / "notes.txt").write_text("not code")
    (pkg / "__pycache__").mkdir(exist_ok=True)
    (pkg / "__pycache__" / "x.py").write_text("cached")
    assert sources_sha256(pkg) == base
    core = pkg / "core" / "loss.py"
    core.write_text(core.read_text() + "\n# changed\n")
    assert sources_sha256(pkg) != base
    # Independent of how the bytes are framed: one file's sha256 differs from the package's.
    assert base != hashlib.sha256((PACKAGE / "core" / "loss.py").read_bytes()).hexdigest()


def test_save_reports_the_code_version(tmp_path):
    cmds = TrainerCommands(tmp_path, owner="t")
    cmds.load({"run_id": "r", "trainer_config": make_cfg().to_dict()})
    batch, manifest = on_policy_batch(cmds.trainer, tmp_path / "b", make_samples(cmds.trainer.vocab_size), 0, run_id="r")
    cmds.step({"run_id": "r", "step": 0, "batch": batch, "manifest": manifest})
    saved = cmds.save({"run_id": "r", "step": 0})
    assert saved["code"] == code_version() and saved["code"]["sha256"] == sources_sha256()
    import torch

    assert saved["code"]["torch"] == torch.__version__ and saved["code"]["threads"] == torch.get_num_threads()
