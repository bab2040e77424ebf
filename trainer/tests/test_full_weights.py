"""What full-weight sync (issue 41) reads from a full fine-tuning checkpoint: model/ is a directory a serving
stack loads as it is (every key the model's, nothing missing, the trained values), and the checkpoint's own
MANIFEST.sha256 lists model/'s files exactly as model/MANIFEST.sha256 does, which is how the sync verifies
model/ from the checkpoint's ref alone (src/activities/weightSync.ts, fullWeightsRef)."""

import hashlib

import torch
from transformers import AutoModelForCausalLM

from ratchet_trainer.core import Trainer, load_batch, save_checkpoint
from helpers import make_cfg, make_samples, on_policy_batch


def test_full_checkpoint_model_dir_loads_as_is_and_its_manifest_follows_from_the_checkpoints(tmp_path):
    t = Trainer("run", make_cfg("tiny", mode="full"))
    t.step(0, load_batch(*on_policy_batch(t, tmp_path, make_samples(t.vocab_size), 0)))
    refs = save_checkpoint(t, tmp_path / "art", 0)
    root = tmp_path / "art" / "runs" / "run" / "checkpoints"
    ckpt = next(root.iterdir())
    top = (ckpt / "MANIFEST.sha256").read_text()
    assert hashlib.sha256(top.encode()).hexdigest() == refs["checkpoint"]["sha256"]
    derived = "".join(line[: line.index("  ") + 2] + line[line.index("  ") + 2 + len("model/"):] + "\n"
                      for line in top.splitlines() if line[line.index("  ") + 2:].startswith("model/"))
    assert derived == (ckpt / "model" / "MANIFEST.sha256").read_text()
    assert hashlib.sha256(derived.encode()).hexdigest() == refs["weights"]["sha256"]

    served, info = AutoModelForCausalLM.from_pretrained(str(ckpt / "model"), dtype=torch.float32, output_loading_info=True)
    assert info["missing_keys"] in ([], set()) and info["unexpected_keys"] in ([], set())
    trained = {k: v.detach().float() for k, v in t.model.state_dict().items()}
    for k, v in served.state_dict().items():
        torch.testing.assert_close(v, trained[k], rtol=0, atol=0)
