"""A run's life on a trainer: one run per trainer (the lease), checkpoints keyed by
the batch they trained on (a redone step never returns the earlier attempt's
weights), and per-step faults that are typed so the run can skip the step."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch
from temporalio.exceptions import ApplicationError

from ratchet_trainer.core import Trainer, load_batch, restore_checkpoint, save_checkpoint
from ratchet_trainer.core.trainer import NonFiniteGradientError, StepConflictError, StepOutOfMemoryError
from ratchet_trainer.lease import TrainerLease
from ratchet_trainer.worker import TrainerActivities
from helpers import make_cfg, make_samples, on_policy_batch, snapshot


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_lease_one_run_at_a_time_until_released_or_expired():
    clock = Clock()
    lease = TrainerLease(ttl_s=60, clock=clock)
    assert lease.claim("a") and lease.claim("a")
    assert not lease.claim("b")
    clock.t = 59
    assert not lease.claim("b")
    # a's call in flight keeps the lease however long it runs.
    lease.begin("a")
    clock.t = 500
    assert not lease.claim("b")
    lease.end("a")
    clock.t = 561
    assert lease.holder_now() is None and lease.claim("b")
    assert not lease.release("a") and lease.holder == "b"
    assert lease.release("b") and lease.claim("c")


def test_announce_answers_only_the_run_that_holds_the_trainer(tmp_path):
    acts = TrainerActivities(tmp_path, worker_id="w")
    first = asyncio.run(acts.announce({"run_id": "a"}))
    assert first["task_queue"].endswith("-w")
    with pytest.raises(ApplicationError) as e:
        asyncio.run(acts.announce({"run_id": "b"}))
    assert e.value.type == "TrainerBusy" and not e.value.non_retryable and "leased to run 'a'" in str(e.value)
    assert asyncio.run(acts.announce({"run_id": "a"})) == first
    assert acts.release({"run_id": "b"})["released"] is False
    assert acts.release({"run_id": "a"})["released"] is True
    assert asyncio.run(acts.announce({"run_id": "b"}))["worker_id"] == "w"


def test_a_run_whose_workflow_ended_loses_the_trainer_to_the_next_announce(tmp_path):
    """Terminated runs never call trainer.release: the next run must not wait out the TTL (issue 42)."""
    running = {"a": True}
    asked: list[str] = []

    async def holder_running(run_id: str) -> bool:
        asked.append(run_id)
        return running.get(run_id, False)

    acts = TrainerActivities(tmp_path, worker_id="w", holder_running=holder_running)
    cfg = make_cfg("tiny").to_dict()
    asyncio.run(acts.announce({"run_id": "a"}))
    acts.load({"run_id": "a", "trainer_config": cfg})
    acts.lease.begin("a")  # a's step still in flight when a was terminated
    with pytest.raises(ApplicationError) as e:
        asyncio.run(acts.announce({"run_id": "b"}))
    assert e.value.type == "TrainerBusy" and asked == ["a"]
    running["a"] = False
    out = asyncio.run(acts.announce({"run_id": "b"}))
    assert out["freed_run_id"] == "a" and acts.lease.holder == "b"
    # a's calls are refused from now on; b's load replaces a's model.
    with pytest.raises(ApplicationError) as e:
        acts.save({"run_id": "a", "step": 0})
    assert e.value.type == "TrainerNotLoaded"
    acts.lease.end("a")
    acts.load({"run_id": "b", "trainer_config": cfg})
    assert acts.trainer.run_id == "b"
    # The holder's own announce never asks Temporal.
    assert "freed_run_id" not in asyncio.run(acts.announce({"run_id": "b"})) and asked == ["a", "a"]


def test_a_second_run_cannot_load_into_a_leased_trainer(tmp_path):
    acts = TrainerActivities(tmp_path, worker_id="w")
    cfg = make_cfg("tiny").to_dict()
    acts.load({"run_id": "a", "trainer_config": cfg})
    held = acts.trainer
    with pytest.raises(ApplicationError) as e:
        acts.load({"run_id": "b", "trainer_config": cfg})
    assert e.value.type == "TrainerBusy" and e.value.non_retryable
    assert acts.trainer is held and held.run_id == "a"
    # Released, the model's memory goes with it and the next run may load.
    acts.release({"run_id": "a"})
    assert acts.trainer is None
    acts.load({"run_id": "b", "trainer_config": cfg})
    assert acts.trainer.run_id == "b"


def test_run_whose_lease_was_taken_sees_trainer_not_loaded(tmp_path):
    clock = Clock()
    acts = TrainerActivities(tmp_path, worker_id="w", lease_ttl_s=60)
    acts.lease.clock = clock
    cfg = make_cfg("tiny").to_dict()
    acts.load({"run_id": "a", "trainer_config": cfg})
    clock.t = 1000  # run a stopped calling: its lease expires, b takes the trainer
    asyncio.run(acts.announce({"run_id": "b"}))
    with pytest.raises(ApplicationError) as e:
        acts.save({"run_id": "a", "step": 0})
    assert e.value.type == "TrainerNotLoaded" and "lease expired" in str(e.value)


def _sha(refs) -> str:
    return refs[0]["sha256"]


def test_redone_step_with_another_batch_gets_its_own_checkpoint(tmp_path):
    """The run failed after save and before recording step 1; resumed, it trained another batch for step 1."""
    cfg = make_cfg("tiny")
    a = Trainer("run", cfg)
    samples = make_samples(a.vocab_size)
    b0 = on_policy_batch(a, tmp_path, samples, 0)
    a.step(0, load_batch(*b0), batch_sha256=_sha(b0))
    ck0 = save_checkpoint(a, tmp_path / "art", 0)
    first = on_policy_batch(a, tmp_path, samples, 1, name="first")
    a.step(1, load_batch(*first), batch_sha256=_sha(first))
    old = save_checkpoint(a, tmp_path / "art", 1)

    b = Trainer("run", cfg)
    restore_checkpoint(b, ck0["checkpoint"])
    second = on_policy_batch(b, tmp_path, make_samples(b.vocab_size, seed=7), 1, name="second")
    assert _sha(second) != _sha(first)
    b.step(1, load_batch(*second), batch_sha256=_sha(second))
    new = save_checkpoint(b, tmp_path / "art", 1)
    assert new["checkpoint"]["uri"] != old["checkpoint"]["uri"]
    assert new["adapter"]["sha256"] != old["adapter"]["sha256"]
    # The saved adapter is what b holds, not what a held.
    c = Trainer("run", cfg)
    restore_checkpoint(c, new["checkpoint"])
    for k, v in snapshot(b).items():
        torch.testing.assert_close(snapshot(c)[k], v, rtol=0, atol=0)
    # The same trainer asked to redo step 1 with the other batch refuses, instead of answering with its ledger.
    with pytest.raises(StepConflictError, match="step 1 was applied from batch"):
        b.step(1, load_batch(*first), batch_sha256=_sha(first))
    assert b.step(1, load_batch(*second), batch_sha256=_sha(second))["applied"] is False


def test_non_finite_gradient_is_typed_and_leaves_the_weights(tmp_path):
    t = Trainer("run", make_cfg("tiny"))
    refs = on_policy_batch(t, tmp_path, make_samples(t.vocab_size), 0)
    batch = load_batch(*refs)
    w0 = snapshot(t)
    t._clip_grads = lambda: float("inf")  # noqa: SLF001 - the fault, made deterministic
    with pytest.raises(NonFiniteGradientError, match="update was not applied"):
        t.step(0, batch)
    assert t.ledger == {} and all(torch.equal(w0[k], v) for k, v in snapshot(t).items())


class OomAbove:
    """Fault injection at the micro-batch: one of more than `limit` tokens raises the out-of-memory error."""

    def __init__(self, t: Trainer, limit: int):
        self.limit, self.calls, self.inner = limit, [], t._micro_batch  # noqa: SLF001

    def __call__(self, batch, sample_ids):
        mb = self.inner(batch, sample_ids)
        n = mb.input_ids.numel()
        self.calls.append(n)
        if n > self.limit:
            raise torch.OutOfMemoryError(f"CUDA out of memory (fake, {n} tokens)")
        return mb


def _oom_trainer(limit: int) -> tuple[Trainer, OomAbove]:
    t = Trainer("run", make_cfg("tiny", micro_batch_tokens=64))
    wrapped = OomAbove(t, limit)
    t._micro_batch = wrapped  # type: ignore[method-assign]  # noqa: SLF001
    return t, wrapped


def test_out_of_memory_retries_once_with_half_the_micro_batch_tokens(tmp_path):
    t, wrapped = _oom_trainer(limit=40)
    refs = on_policy_batch(Trainer("run", make_cfg("tiny")), tmp_path, make_samples(t.vocab_size), 0)
    m = t.step(0, load_batch(*refs))
    assert m["applied"] and m["micro_batch_tokens"] == 32 and t.policy_version == 1
    assert max(wrapped.calls) > 40 and wrapped.calls[-1] <= 40


def test_out_of_memory_twice_is_a_typed_step_fault(tmp_path):
    t, _ = _oom_trainer(limit=1)
    refs = on_policy_batch(Trainer("run", make_cfg("tiny")), tmp_path, make_samples(t.vocab_size), 0)
    with pytest.raises(StepOutOfMemoryError, match="micro_batch_tokens=32"):
        t.step(0, load_batch(*refs))
    assert t.ledger == {}


def _split_trajectory_batch(tmp_path, vocab: int):
    """One trajectory in two segments of 30 tokens (a Qwen3-style template: a segment per turn), one more sample."""
    samples = make_samples(vocab, lengths=(30, 30, 16), advantages=(1.0, 1.0, -1.0))
    for s, t in zip(samples, (0, 0, 1)):
        s["trajectory"] = t
    return on_policy_batch(Trainer("run", make_cfg("tiny")), tmp_path, samples, 0)


def test_out_of_memory_retry_splits_a_trajectory_s_segments_under_a_token_level_loss(tmp_path):
    """Token-level loss: a split trajectory's segments are planned like any samples, so the retry at
    half the tokens can put them in separate micro-batches (they once stayed together: skipped as OOM)."""
    t, wrapped = _oom_trainer(limit=40)
    m = t.step(0, load_batch(*_split_trajectory_batch(tmp_path, t.vocab_size)))
    assert m["applied"] and m["micro_batch_tokens"] == 32 and max(wrapped.calls[-3:]) <= 40


def test_under_gspo_a_trajectory_s_segments_stay_in_one_micro_batch(tmp_path):
    """GSPO's ratio spans the trajectory: its segments share a micro-batch, so the retry cannot split them."""
    t = Trainer("run", make_cfg("tiny", micro_batch_tokens=64, loss={"kind": "gspo"}))
    wrapped = OomAbove(t, 40)
    t._micro_batch = wrapped  # type: ignore[method-assign]  # noqa: SLF001
    with pytest.raises(StepOutOfMemoryError):
        t.step(0, load_batch(*_split_trajectory_batch(tmp_path, t.vocab_size)))
