"""Version skew (issue 42, docs/upgrades.md): a trainer_config from a newer build, which adds a key or a
choice this trainer does not know, is handed back to a newer trainer instead of failing the run; a value
that is simply wrong still fails at once."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.exceptions import ApplicationError

from ratchet_trainer.core.config import ConfigError, NewerConfigError, newer_than_this_code, parse_trainer_config
from ratchet_trainer.worker import TrainerActivities
from helpers import make_cfg


def newer(cfg: dict, **extra) -> dict:
    """cfg as a newer build would send it: one key more in [trainer] and in [trainer.loss]."""
    return {**cfg, **extra, "loss": {**cfg["loss"], "added_later": 1}}


def test_unknown_keys_and_choices_mean_a_newer_build_and_other_errors_do_not():
    cfg = make_cfg("tiny").to_dict()
    assert newer_than_this_code(cfg) is None
    why = newer_than_this_code(newer(cfg))
    assert why is not None and "added_later" in why
    assert "rollout_mode" in newer_than_this_code({**cfg, "rollout_mode": "x"})
    assert "'tis2'" in newer_than_this_code({**cfg, "loss": {**cfg["loss"], "correction": "tis2"}})
    # A wrong value of a known key is not skew: the run's config is wrong, and it fails as before.
    assert newer_than_this_code({**cfg, "optim": {**cfg["optim"], "lr": -1}}) is None
    # Every other reader of a trainer_config (replay-step, init_from) still gets a ConfigError.
    with pytest.raises(ConfigError):
        parse_trainer_config(newer(cfg))
    assert issubclass(NewerConfigError, ConfigError)


def test_a_newer_runs_load_is_handed_back_and_its_announces_refused_while_other_runs_train(tmp_path):
    acts = TrainerActivities(tmp_path, worker_id="old")
    cfg = make_cfg("tiny").to_dict()
    asyncio.run(acts.announce({"run_id": "moved"}))
    acts.load({"run_id": "moved", "trainer_config": cfg})  # the run's steps on the old build
    assert acts.trainer is not None and acts.trainer.run_id == "moved"
    # The run moved to a newer build at a step boundary and reloads on the trainer it held.
    with pytest.raises(ApplicationError) as e:
        acts.load({"run_id": "moved", "trainer_config": newer(cfg)})
    # TrainerBusy, non-retryable for this call: the workflow re-announces instead of retrying this trainer.
    assert e.value.type == "TrainerBusy" and e.value.non_retryable and "added_later" in str(e.value)
    assert acts.lease.holder_now() is None and acts.trainer is None  # the lease and the model are freed
    # Its announces are refused retryably: the retry goes to the shared queue, where a newer trainer takes it.
    with pytest.raises(ApplicationError) as e:
        asyncio.run(acts.announce({"run_id": "moved"}))
    assert e.value.type == "TrainerBusy" and not e.value.non_retryable
    # Runs still on the old build are served as before.
    assert asyncio.run(acts.announce({"run_id": "other"}))["worker_id"] == "old"
    assert acts.load({"run_id": "other", "trainer_config": cfg})["policy_version"] == 0


def test_a_wrong_value_still_fails_the_load_at_once(tmp_path):
    acts = TrainerActivities(tmp_path, worker_id="w")
    cfg = make_cfg("tiny").to_dict()
    asyncio.run(acts.announce({"run_id": "a"}))
    with pytest.raises(ApplicationError) as e:
        acts.load({"run_id": "a", "trainer_config": {**cfg, "optim": {**cfg["optim"], "lr": -1}}})
    assert e.value.type == "ConfigError" and e.value.non_retryable
    assert "a" not in acts.newer_runs
