"""What full-weight sync (issue 41) reads from a full fine-tuning checkpoint: model/ is a directory a serving
stack loads as it is (every key the model's, nothing missing, the trained values), and the checkpoint's own
MANIFEST.sha256 lists model/'s files exactly as model/MANIFEST.sha256 does, which is how the sync verifies
model/ from the checkpoint's ref alone (src/activities/weightSync.ts, fullWeightsRef)."""

import hashlib

import torch
from transformers import AutoModelForCausalLM

from ratchet_trainer.core import Trainer, load_batch, restore_checkpoint, save_checkpoint
from helpers import assert_same_update, make_cfg, make_samples, on_policy_batch


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


def _tiny_qwen3(directory, tie: bool) -> str:
    """A random Qwen3 (the architecture the GPU configs train) saved as a model directory."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(1)
    conf = Qwen3Config(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                       num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=tie)
    Qwen3ForCausalLM(conf).save_pretrained(str(directory))
    return str(directory)


def test_a_two_rank_fsdp_full_checkpoint_exports_what_one_process_trains(tmp_path):
    """2 gloo ranks (FSDP2, as on GPUs past one): rank 0 writes the whole gathered model, every key once, the
    trained values exactly, and the same model one process trains from the same batch, tied embeddings both
    ways; the checkpoint resumes on 2 ranks and in one process. Sharded, a tied embedding became its own
    parameter and trained apart from the head: model/ held two different tensors for the one its config
    ties (vLLM reads only the embedding) and differed from one process's by ~2 x lr."""
    from ratchet_trainer.core import write_batch
    from ratchet_trainer.core.artifacts import uri_to_path
    import dist_worker

    dirs = {f"tie_{tie}": _tiny_qwen3(tmp_path / f"qwen3-tie-{tie}", tie) for tie in (True, False)}
    refs = write_batch(tmp_path, "b", make_samples(256), {"run_id": "run", "step": 0, "vocab_size": 256})
    dual = dist_worker.spawn(dist_worker.run_full_exports, 2, tmp_path, str(tmp_path / "ranks"), refs, dirs)
    for name, model_dir in dirs.items():
        tie = name == "tie_True"
        one = Trainer("run", dist_worker.full_qwen3_cfg(model_dir))
        one.step(0, load_batch(*refs))
        single = save_checkpoint(one, tmp_path / "one" / name, 0)
        assert dual[name]["parallelism"] == "fsdp"
        ckpt = uri_to_path(dual[name]["ckpt"]["checkpoint"]["uri"])
        assert sorted(p.name for p in (ckpt / "model").iterdir()) == ["MANIFEST.sha256", "config.json", "model.safetensors"]
        served, info = AutoModelForCausalLM.from_pretrained(str(ckpt / "model"), dtype=torch.float32, output_loading_info=True)
        assert info["missing_keys"] in ([], set()) and info["unexpected_keys"] in ([], set()), name
        assert type(served).__name__ == "Qwen3ForCausalLM" and served.config.architectures == ["Qwen3ForCausalLM"]
        assert served.config.tie_word_embeddings is tie
        assert (served.lm_head.weight is served.model.embed_tokens.weight) is tie, name
        trained = {k: v.float() for k, v in dual[name]["trained"].items()}
        assert torch.equal(trained["lm_head.weight"], trained["model.embed_tokens.weight"]) is tie, name
        for k, v in served.state_dict().items():
            torch.testing.assert_close(v, trained[k], rtol=0, atol=0, msg=lambda m: f"{name} {k}: {m}")
        # The checkpoint resumes: on fresh ranks and in one process, the same weights (and still one tensor).
        back = Trainer("run", dist_worker.full_qwen3_cfg(model_dir))
        restore_checkpoint(back, dual[name]["ckpt"]["checkpoint"])
        for restored in (dual[name]["restored"], back.model.state_dict()):
            assert restored.keys() == trained.keys()
            for k, v in restored.items():
                assert torch.equal(v.float(), trained[k]), (name, k)
        assert (back.model.lm_head.weight is back.model.model.embed_tokens.weight) is tie
        # One process's export of the same step, up to the ranks' summation order (helpers.assert_same_update).
        alone = AutoModelForCausalLM.from_pretrained(str(uri_to_path(single["weights"]["uri"])), dtype=torch.float32)
        assert_same_update(served.state_dict(), alone.state_dict(), one.cfg.optim.lr)
