"""Storage the trainer keeps on its own disk stays bounded (issue 42): the local staging copy of a checkpoint
saved to S3 goes once it is uploaded, and the S3 download cache is an LRU bounded by bytes
($RATCHET_CACHE_MAX_GIB) that never evicts an entry in use. S3 is the in-memory fake of test_stale_save."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import torch

from ratchet_trainer.core import Trainer, load_batch, restore_checkpoint, save_checkpoint
from ratchet_trainer.core.store import CACHE_IN_USE_S, CACHE_LIMIT_ENV, StoreConfigError, cache_entries, cache_limit_bytes, prune_cache
from helpers import make_cfg, make_samples, on_policy_batch, snapshot
from test_stale_save import Backend, _store


def _entry(root: Path, key: str, size: int, age_s: float) -> Path:
    """A committed cache entry of `size` bytes, last used `age_s` seconds ago."""
    e = root / "bucket" / key / ("ab" * 8)
    e.mkdir(parents=True)
    (e / "w.bin").write_bytes(b"x" * size)
    (e / "MANIFEST.sha256").write_text("")
    t = time.time() - age_s
    os.utime(e, (t, t))
    return e


def _du(root: Path) -> int:
    return sum((Path(d) / f).stat().st_size for d, _, fs in os.walk(root) for f in fs)


def test_staging_goes_once_uploaded_and_the_checkpoint_restores_from_s3(tmp_path):
    backend = Backend()
    store = _store(backend, tmp_path / "cache")
    t = Trainer("run", make_cfg("tiny"))
    samples = make_samples(t.vocab_size)
    t.step(0, load_batch(*on_policy_batch(t, tmp_path, samples, 0)))
    t.step(1, load_batch(*on_policy_batch(t, tmp_path, samples, 1)))
    staging = tmp_path / "trainer" / "runs" / "run" / "checkpoints"
    staging.mkdir(parents=True)
    # Step 0's staging, left by an upload that failed and was never retried; a write in progress beside it.
    (staging / "step-0-aaaaaaaaaaaaaaaa").mkdir()
    (staging / "step-0-aaaaaaaaaaaaaaaa" / "optimizer.pt").write_bytes(b"o" * 100)
    (staging / ".step-2-bbbbbbbbbbbbbbbb.tmp-1-x").mkdir()

    refs = save_checkpoint(t, tmp_path / "trainer", 1, store)

    assert sorted(p.name for p in staging.iterdir()) == [".step-2-bbbbbbbbbbbbbbbb.tmp-1-x"]
    assert any(k.endswith("/optimizer.pt") for k in backend.objects)
    # What was uploaded is whole: another trainer restores the same weights from S3 alone.
    other = Trainer("run", make_cfg("tiny"))
    restore_checkpoint(other, refs["checkpoint"], _store(backend, tmp_path / "reader-cache"))
    assert other.policy_version == t.policy_version
    for k, v in snapshot(t).items():
        torch.testing.assert_close(snapshot(other)[k], v, rtol=0, atol=0)
    # A retried save of the same step finds it in the store and writes no staging again.
    assert save_checkpoint(t, tmp_path / "trainer", 1, store) == refs
    assert sorted(p.name for p in staging.iterdir()) == [".step-2-bbbbbbbbbbbbbbbb.tmp-1-x"]


def test_prune_evicts_least_recently_used_to_the_bound_sparing_entries_in_use(tmp_path):
    root = tmp_path / "cache"
    oldest = _entry(root, "runs/r/checkpoints/step-1", 3000, 5000)
    older = _entry(root, "runs/r/checkpoints/step-2", 2000, 4000)
    kept = _entry(root, "runs/r/checkpoints/step-3", 1000, 3000)
    in_use = _entry(root, "runs/r/checkpoints/step-4", 4000, CACHE_IN_USE_S / 2)
    (root / "bucket" / "runs" / "r" / ".x.tmp-9").mkdir()  # a download in progress: never counted or touched
    assert [e for e, _, _ in cache_entries(root)] == [oldest, older, kept, in_use]

    # 10,000 bytes held, bound 5,500: the two least recently used go (5,000 left), the in-use one stays.
    gone = prune_cache(root, 5500, keep={kept})
    assert gone == [(oldest, 3000), (older, 2000)]
    assert not oldest.exists() and not older.exists() and kept.is_dir() and in_use.is_dir()
    assert not (root / "bucket" / "runs" / "r" / "checkpoints" / "step-1").exists()  # its empty folders too
    assert _du(root) == 5000

    # Bound 0: everything not in use or kept may go; the kept and the in-use entry stay, over the bound.
    assert prune_cache(root, 0, keep={kept}) == []
    assert prune_cache(root, 0) == [(kept, 1000)]
    assert in_use.is_dir() and (root / "bucket" / "runs" / "r" / ".x.tmp-9").is_dir()


def test_fetch_bounds_the_cache_and_a_hit_marks_the_entry_used(tmp_path, monkeypatch):
    backend = Backend()
    writer = _store(backend, tmp_path / "writer-cache")
    t = Trainer("run", make_cfg("tiny"))
    samples = make_samples(t.vocab_size)
    refs = []
    for step in (0, 1):
        t.step(step, load_batch(*on_policy_batch(t, tmp_path, samples, step)))
        refs.append(save_checkpoint(t, tmp_path / "trainer", step, writer)["checkpoint"])
    reader = _store(backend, tmp_path / "reader-cache")
    first = reader.fetch_dir(refs[0], "checkpoint")
    one = _du(first)
    assert one > 0
    # Bound: one checkpoint and a half. Step 0's copy last used an hour ago: step 1's download evicts it.
    monkeypatch.setenv(CACHE_LIMIT_ENV, str(1.5 * one / 2**30))
    hour_ago = time.time() - 3600
    os.utime(first, (hour_ago, hour_ago))
    second = reader.fetch_dir(refs[1], "checkpoint")
    assert second.is_dir() and not first.exists()
    # Fetched again (step 0 is wanted once more): step 1's copy is in use (fresh), so both stay, over the bound.
    again = reader.fetch_dir(refs[0], "checkpoint")
    assert again == first and again.is_dir() and second.is_dir()
    # A hit marks its entry used: an hour-old entry read now is not evicted by the next download.
    os.utime(second, (hour_ago, hour_ago))
    os.utime(again, (hour_ago, hour_ago))
    assert reader.fetch_dir(refs[1], "checkpoint") == second and time.time() - second.stat().st_mtime < 60
    assert [e for e, _, _ in cache_entries(tmp_path / "reader-cache")] == [again, second]


def test_a_bad_bound_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv(CACHE_LIMIT_ENV, "lots")
    with pytest.raises(StoreConfigError, match=r"RATCHET_CACHE_MAX_GIB='lots' is not a size in GiB >= 0\. Fix: e\.g\."):
        cache_limit_bytes()
    monkeypatch.setenv(CACHE_LIMIT_ENV, "0.5")
    assert cache_limit_bytes() == 2**29
    monkeypatch.delenv(CACHE_LIMIT_ENV)
    assert cache_limit_bytes() == 20 * 2**30
