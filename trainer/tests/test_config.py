import logging

import pytest

from ratchet_trainer.core.config import ConfigError, parse_trainer_config, schema
from helpers import TINY


def test_defaults_are_the_run_configs():
    # The same defaults as src/config/schema.ts's [trainer] (test/unit/config/schema.test.ts checks every key).
    cfg = parse_trainer_config({"model": {"path": "/m"}})
    assert cfg.mode == "lora" and cfg.adapter is cfg.lora
    assert cfg.lora.rank == 8 and cfg.lora.alpha == 16 and cfg.lora.dropout == 0.0
    assert "down_proj" in cfg.lora.target_modules
    assert cfg.optim.lr == 1e-5 and cfg.optim.weight_decay == 0.0
    assert cfg.micro_batch_tokens == 4096 and cfg.loss.kind == "grpo" and cfg.loss.normalization == "dr_grpo"
    assert schema()["defaults"]["lora"]["rank"] == 8


def test_schema_choices_name_real_keys_and_their_defaults_are_choices():
    # The TypeScript side of this schema is compared in test/unit/config/schema.test.ts.
    s = schema()
    for dotted, choices in s["choices"].items():
        node = s["defaults"]
        for part in dotted.split("."):
            assert part in node, f"CHOICES names {dotted}, which is not a key"
            node = node[part]
        assert node in choices, f"{dotted}'s default {node!r} is not one of {choices}"
    for dotted in s["context_keys"]:
        head, _, leaf = dotted.rpartition(".")
        assert leaf in (s["defaults"][head] if head else s["defaults"]), dotted


def test_full_finetune_and_fingerprint_changes_with_lora_shape():
    full = parse_trainer_config({"model": {"config": TINY}, "mode": "full"})
    assert full.adapter is None
    a = parse_trainer_config({"model": {"config": TINY}, "lora": {"rank": 4}})
    b = parse_trainer_config({"model": {"config": TINY}, "lora": {"rank": 8}})
    assert a.model_fingerprint() != b.model_fingerprint() != full.model_fingerprint()
    c = parse_trainer_config({"model": {"config": TINY}, "lora": {"rank": 4}, "optim": {"lr": 1.0}})
    assert a.model_fingerprint() == c.model_fingerprint()


# What a run sent before the keys matched the run config (toTrainerConfig before this schema): a stored
# history's trainer.load carries it, and its checkpoints' fingerprints must still match.
LEGACY = {
    "model": {"path": "/m", "ac": {"freq": 2}, "lora": {"rank": 8, "alpha": 16, "dropout": 0, "target_modules": ["q_proj", "v_proj"]}},
    "optim": {"lr": 1e-5, "weight_decay": 0, "max_grad_norm": 1},
    "loss": {"type": "gspo", "normalization": "sequence_mean", "kl_coef": 0, "temperature": 0.7, "correction": "tis",
             "tis_cap": 2, "mask_threshold": 1, "dual_clip": 3},
    "seq_len": 2048, "micro_batch_tokens": 4096, "packing": "auto", "device": "auto", "seed": 0,
}


def test_old_spellings_are_read_as_today_s_and_logged_as_deprecated(caplog):
    with caplog.at_level(logging.WARNING, logger="ratchet_trainer.core.config"):
        old = parse_trainer_config(LEGACY)
    assert "model.lora is deprecated" in caplog.text and "loss.type is deprecated" in caplog.text
    assert "sequence_mean" in caplog.text and "model.ac is deprecated" in caplog.text
    new = parse_trainer_config({
        **{k: v for k, v in LEGACY.items() if k not in ("model", "loss")},
        "model": {"path": "/m"}, "mode": "lora", "ac": {"freq": 2}, "lora": LEGACY["model"]["lora"],
        "loss": {**{k: v for k, v in LEGACY["loss"].items() if k not in ("type", "normalization")}, "kind": "gspo", "normalization": "sequence"},
    })
    assert old == new and old.loss.kind == "gspo" and old.loss.normalization == "sequence" and old.ac.freq == 2
    # The fingerprint is what the earlier schema computed for LEGACY: its checkpoints still load.
    assert old.model_fingerprint() == new.model_fingerprint() == "89c5c595d803fab1"
    full = parse_trainer_config({"model": {"path": "/m", "lora": None}})
    assert full.mode == "full" and full.adapter is None
    assert parse_trainer_config(old.to_dict()) == old  # a checkpoint's trainer_state.json reads back


def test_old_and_new_spelling_together_is_an_error():
    with pytest.raises(ConfigError, match="type .the old spelling. and kind"):
        parse_trainer_config({"model": {"path": "/m"}, "loss": {"type": "grpo", "kind": "grpo"}})
    with pytest.raises(ConfigError, match="model.lora .the old spelling. and lora/mode"):
        parse_trainer_config({"model": {"path": "/m", "lora": None}, "mode": "lora"})


@pytest.mark.parametrize("raw, needle", [
    ({}, "trainer_config.model is required"),
    ({"model": {"path": "/m", "config": TINY}}, "exactly one of"),
    ({"model": {"path": "/m"}, "lerning_rate": 1}, "trainer_config: unknown key(s) ['lerning_rate']"),
    ({"model": {"path": "/m"}, "lora": {"rank": 0}}, "trainer_config.lora.rank must be >= 1"),
    ({"model": {"path": "/m"}, "lora": {"rank": "4"}}, "trainer_config.lora.rank must be an integer"),
    ({"model": {"path": "/m"}, "lora": {"target_modules": []}}, "target_modules must be a non-empty list"),
    ({"model": {"path": "/m"}, "loss": {"kind": "ppo"}}, "trainer_config.loss.kind must be one of"),
    ({"model": {"path": "/m"}, "mode": "adapter"}, "trainer_config.mode must be one of ['lora', 'full']"),
    ({"model": {"path": "/m"}, "loss": {"normalization": "x"}}, "trainer_config.loss.normalization"),
    ({"model": {"path": "/m"}, "optim": {"lr": -1e-5}}, "trainer_config.optim.lr must be >= 0"),
    ({"model": {"path": "/m"}, "ac": {"freq": -1}}, "trainer_config.ac.freq must be >= 0"),
    ({"model": {"path": "/m"}, "seq_len": 1}, "trainer_config.seq_len must be >= 2"),
    ({"model": {"path": "/m"}, "packing": "yes"}, 'trainer_config.packing must be true, false or "auto"'),
    ({"model": {"path": "/m"}, "loss": {"kind": "gspo", "eps_low": 0.2, "eps_high": 0.28}}, "token-ratio (PPO) range"),
    ({"model": {"path": "/m"}, "loss": {"temperature": 0}}, "trainer_config.loss.temperature must be > 0"),
    ({"model": {"path": "/m"}, "loss": {"correction": "is"}}, "trainer_config.loss.correction must be one of"),
    ({"model": {"path": "/m"}, "loss": {"tis_cap": 0.5}}, "trainer_config.loss.tis_cap must be >= 1"),
    ({"model": {"path": "/m"}, "loss": {"dual_clip": 1.0}}, "trainer_config.loss.dual_clip must be 0 (off) or > 1"),
    ({"model": {"path": "/m"}, "gpu": {"devices": [0, -1]}}, "trainer_config.gpu.devices must be a list of GPU indices"),
    ({"model": {"path": "/m"}, "gpu": {"devices": "0,1"}}, "trainer_config.gpu.devices must be a list of GPU indices"),
])
def test_bad_config_names_the_key(raw, needle):
    with pytest.raises(ConfigError) as e:
        parse_trainer_config(raw)
    assert needle in str(e.value)


def test_clip_defaults_follow_the_loss_kind():
    g = parse_trainer_config({"model": {"path": "/m"}, "loss": {"kind": "gspo"}})
    assert g.loss.clip_range() == (3e-4, 4e-4)
    p = parse_trainer_config({"model": {"path": "/m"}, "loss": {"kind": "grpo", "eps_low": None}})
    assert p.loss.clip_range() == (0.2, 0.28)
    assert p.loss.correction == "tis" and p.loss.temperature == 1.0


def test_gpu_devices_are_read_and_kept():
    # The run config's trainer.gpu.devices (src/layout) reach the trainer unchanged; it starts on none of them itself.
    assert parse_trainer_config({"model": {"path": "/m"}, "gpu": {"count": 2, "devices": [2, 3]}}).gpu.devices == (2, 3)
    assert parse_trainer_config({"model": {"path": "/m"}}).gpu.devices is None
