"""A corrupt checkpoint (issue 25, hole 6): a flipped byte in its adapter or its trainer state is found
on load (ArtifactError, naming the file), before anything changes in the trainer; the checkpoint
before it still loads, and the steps after it are applied again, once each (the ledger comes with
the checkpoint). The workflow's fallback (src/records/fallback.ts) relies on exactly this."""

import pytest

from ratchet_trainer.core import Trainer, load_batch, restore_checkpoint, save_checkpoint
from ratchet_trainer.core.artifacts import ArtifactError, uri_to_path, verify_dir
from helpers import make_cfg, make_samples, on_policy_batch, snapshot


def _flip(path):
    buf = bytearray(path.read_bytes())
    buf[len(buf) // 2] ^= 0x20
    path.write_bytes(bytes(buf))


@pytest.mark.parametrize("damaged", ["adapter/adapter_model.safetensors", "trainer_state.json"])
def test_corrupt_newest_checkpoint_is_refused_and_the_one_before_loads(damaged, tmp_path):
    cfg = make_cfg("tiny")
    art = tmp_path / "art"
    t = Trainer("run", cfg)
    samples = make_samples(t.vocab_size)
    b0 = on_policy_batch(t, tmp_path, samples, 0)
    t.step(0, load_batch(*b0))
    ckpt0 = save_checkpoint(t, art, 0)["checkpoint"]
    b1 = on_policy_batch(t, tmp_path, samples, 1)
    t.step(1, load_batch(*b1))
    ckpt1 = save_checkpoint(t, art, 1)["checkpoint"]
    _flip(uri_to_path(ckpt1["uri"]) / damaged)

    fresh = Trainer("run", cfg)
    before = snapshot(fresh)
    with pytest.raises(ArtifactError, match=damaged.split("/")[-1]):
        restore_checkpoint(fresh, ckpt1)
    # Verified before anything is loaded: the trainer is as it was.
    after = snapshot(fresh)
    assert all((after[k] == v).all() for k, v in before.items())
    assert fresh.ledger == {}

    # The fallback: the checkpoint before loads; step 1 is not in its ledger, so it is applied again, once.
    state = restore_checkpoint(fresh, ckpt0)
    assert state["step"] == 0 and sorted(fresh.ledger) == [0]
    metrics = fresh.step(1, load_batch(*b1))
    assert metrics["applied"] is True
    assert sorted(fresh.ledger) == [0, 1]
    assert fresh.step(1, load_batch(*b1))["applied"] is False  # a retry of the same step applies nothing

    # Saving the retrained step (the same batch, so the same checkpoint name: seeded rollouts redo it) must
    # not hand back the corrupt directory, which would send the run into the same fallback again (seen in
    # the fresh-clone CI run's lifecycle test). It is written beside it; the corrupt one is left as it was.
    bad = uri_to_path(ckpt1["uri"])
    bad_bytes = (bad / damaged).read_bytes()
    redone = save_checkpoint(fresh, art, 1)["checkpoint"]
    assert uri_to_path(redone["uri"]) != bad and ".attempt-" in redone["uri"]
    verify_dir(redone, "checkpoint")
    assert (bad / damaged).read_bytes() == bad_bytes
    again = Trainer("run", cfg)
    assert restore_checkpoint(again, redone)["step"] == 1
    # A retried save returns that same checkpoint, not yet another one.
    assert save_checkpoint(fresh, art, 1)["checkpoint"] == redone
