import pytest

from ratchet_trainer.core.config import ConfigError, parse_trainer_config
from helpers import TINY


def test_defaults_mirror_seed_001():
    cfg = parse_trainer_config({"model": {"path": "/m"}})
    assert cfg.model.lora.rank == 4 and cfg.model.lora.alpha == 8 and cfg.model.lora.dropout == 0.0
    assert "down_proj" in cfg.model.lora.target_modules
    assert cfg.optim.lr == 1e-5 and cfg.optim.weight_decay == 0.0


def test_full_finetune_and_fingerprint_changes_with_lora_shape():
    full = parse_trainer_config({"model": {"config": TINY, "lora": None}})
    assert full.model.lora is None
    a = parse_trainer_config({"model": {"config": TINY, "lora": {"rank": 4}}})
    b = parse_trainer_config({"model": {"config": TINY, "lora": {"rank": 8}}})
    assert a.model_fingerprint() != b.model_fingerprint() != full.model_fingerprint()
    c = parse_trainer_config({"model": {"config": TINY, "lora": {"rank": 4}}, "optim": {"lr": 1.0}})
    assert a.model_fingerprint() == c.model_fingerprint()


@pytest.mark.parametrize("raw, needle", [
    ({}, "trainer_config.model is required"),
    ({"model": {"path": "/m", "config": TINY}}, "exactly one of"),
    ({"model": {"path": "/m"}, "lerning_rate": 1}, "trainer_config: unknown key(s) ['lerning_rate']"),
    ({"model": {"path": "/m", "lora": {"rank": 0}}}, "trainer_config.model.lora.rank must be >= 1"),
    ({"model": {"path": "/m", "lora": {"rank": "4"}}}, "trainer_config.model.lora.rank must be an integer"),
    ({"model": {"path": "/m", "lora": {"target_modules": []}}}, "target_modules must be a non-empty list"),
    ({"model": {"path": "/m"}, "loss": {"type": "ppo"}}, "trainer_config.loss.type must be one of"),
    ({"model": {"path": "/m"}, "loss": {"normalization": "x"}}, "trainer_config.loss.normalization"),
    ({"model": {"path": "/m"}, "optim": {"lr": -1e-5}}, "trainer_config.optim.lr must be >= 0"),
    ({"model": {"path": "/m", "ac": {"freq": -1}}}, "trainer_config.model.ac.freq must be >= 0"),
    ({"model": {"path": "/m"}, "seq_len": 1}, "trainer_config.seq_len must be >= 2"),
    ({"model": {"path": "/m"}, "packing": "yes"}, 'trainer_config.packing must be true, false or "auto"'),
    ({"model": {"path": "/m"}, "loss": {"type": "gspo", "eps_low": 0.2, "eps_high": 0.28}}, "token-ratio (PPO) range"),
    ({"model": {"path": "/m"}, "loss": {"temperature": 0}}, "trainer_config.loss.temperature must be > 0"),
    ({"model": {"path": "/m"}, "loss": {"correction": "is"}}, "trainer_config.loss.correction must be one of"),
    ({"model": {"path": "/m"}, "loss": {"tis_cap": 0.5}}, "trainer_config.loss.tis_cap must be >= 1"),
    ({"model": {"path": "/m"}, "loss": {"dual_clip": 1.0}}, "trainer_config.loss.dual_clip must be 0 (off) or > 1"),
])
def test_bad_config_names_the_key(raw, needle):
    with pytest.raises(ConfigError) as e:
        parse_trainer_config(raw)
    assert needle in str(e.value)


def test_clip_defaults_follow_the_loss_type():
    g = parse_trainer_config({"model": {"path": "/m"}, "loss": {"type": "gspo"}})
    assert g.loss.clip_range() == (3e-4, 4e-4)
    p = parse_trainer_config({"model": {"path": "/m"}, "loss": {"type": "grpo", "eps_low": None}})
    assert p.loss.clip_range() == (0.2, 0.28)
    assert p.loss.correction == "tis" and p.loss.temperature == 1.0
