"""The trainer's S3 store against a real MinIO (infra/minio.sh start): a checkpoint saved
through S3 and restored by a trainer that shares no directory with the one that saved it,
a batch read from S3, and the errors for a damaged object, a wrong bucket and a store that
is down. Skipped loudly (failed under RATCHET_REQUIRE_STACK=1) when MinIO is not running."""

from __future__ import annotations

import os
import socket
import uuid

import pytest
import torch

from ratchet_trainer.core import Trainer, load_batch, restore_checkpoint, save_checkpoint
from ratchet_trainer.core.artifacts import ArtifactError
from ratchet_trainer.core.store import S3Store, StoreUnavailable, store_for
from helpers import make_cfg, make_samples, on_policy_batch, snapshot

PORT = int(os.environ.get("RATCHET_MINIO_PORT", "9100"))
ENDPOINT = f"http://127.0.0.1:{PORT}"
BUCKET = os.environ.get("RATCHET_MINIO_BUCKET", "ratchet")


def minio_up() -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", PORT)) == 0


if not minio_up():
    reason = f"MinIO is not listening on {ENDPOINT}. Fix: bash infra/minio.sh start"
    if os.environ.get("RATCHET_REQUIRE_STACK") == "1":
        raise RuntimeError(f"RATCHET_REQUIRE_STACK=1 but {reason}")
    print(f"SKIPPED test_s3_store: {reason}")
    pytestmark = pytest.mark.skip(reason=reason)


@pytest.fixture(autouse=True)
def minio_credentials(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", os.environ.get("MINIO_ROOT_USER", "ratchet"))
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", os.environ.get("MINIO_ROOT_PASSWORD", "ratchet-secret"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


@pytest.fixture
def settings():
    return {"url": f"s3://{BUCKET}/pytest-{uuid.uuid4().hex[:8]}", "endpoint": ENDPOINT}


def test_checkpoint_saved_to_s3_restores_on_another_host(tmp_path, settings):
    store = store_for(settings, tmp_path / "host-a-cache")
    cfg = make_cfg("tiny")
    a = Trainer("run", cfg)
    samples = make_samples(a.vocab_size)
    a.step(0, load_batch(*on_policy_batch(a, tmp_path, samples, 0)))
    refs = save_checkpoint(a, tmp_path / "host-a", 0, store)
    assert refs["checkpoint"]["uri"] == f"{settings['url']}/runs/run/checkpoints/step-0"
    assert refs["adapter"]["uri"] == f"{settings['url']}/runs/run/checkpoints/step-0/adapter"
    # Same refs for the same step, even from a trainer whose local staging is gone.
    assert save_checkpoint(a, tmp_path / "elsewhere", 0, store) == refs

    # "Host B": its own cache directory, nothing of host A's disk.
    other = S3Store(settings, tmp_path / "host-b-cache")
    b = Trainer("run", cfg)
    restore_checkpoint(b, refs["checkpoint"], other)
    assert b.policy_version == 1 and b.ledger.keys() == a.ledger.keys()
    for k, v in snapshot(a).items():
        torch.testing.assert_close(snapshot(b)[k], v, rtol=0, atol=0)
    adapter_dir = other.fetch_dir(refs["adapter"], "adapter")
    assert (adapter_dir / "adapter_model.safetensors").is_file() and (adapter_dir / "adapter_config.json").is_file()


def test_batch_read_from_s3_and_a_damaged_object_is_refused(tmp_path, settings):
    store = store_for(settings, tmp_path / "cache")
    a = Trainer("run", make_cfg("tiny"))
    batch_ref, manifest_ref = on_policy_batch(a, tmp_path, make_samples(a.vocab_size), 0)
    refs = [store.put_bytes(f"runs/run/steps/0/batch.{ext}", open(r["uri"][len("file://"):], "rb").read())
            for r, ext in ((batch_ref, "safetensors"), (manifest_ref, "json"))]
    local = load_batch(batch_ref, manifest_ref)
    remote = load_batch(refs[0], refs[1], store)
    assert torch.equal(local.input_ids, remote.input_ids) and torch.equal(local.advantages, remote.advantages)
    store.client.put_object(Bucket=BUCKET, Key=store.key_of_uri(refs[1]["uri"]), Body=b"{}")
    with pytest.raises(ArtifactError, match=r"is corrupt: recorded sha256 .* found"):
        load_batch(refs[0], refs[1], store)


def test_wrong_bucket_refused_keys_and_store_down_are_waits(tmp_path):
    """The trainer works mid-run only (openRun checked the store first): a bucket gone or keys refused
    (rotated, expired) is a wait naming the store's error (issue 39, item 4), like a store that is down."""
    wrong = S3Store({"url": "s3://no-such-bucket-ratchet/p", "endpoint": ENDPOINT}, tmp_path)
    with pytest.raises(StoreUnavailable, match=r"refused the request \(NoSuchBucket.*waiting-for-store.*Fix: the bucket is gone"):
        wrong.put_bytes("k", b"v")
    refused = S3Store({"url": f"s3://{BUCKET}/p", "endpoint": ENDPOINT}, tmp_path)
    # The host's keys after the server's were rotated (boto3's default session caches the first keys it found).
    import boto3
    from botocore.config import Config
    refused.client = boto3.session.Session(aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key="rotated-away").client(
        "s3", endpoint_url=ENDPOINT, region_name="us-east-1", config=Config(s3={"addressing_style": "path"}))
    with pytest.raises(StoreUnavailable, match=r"refused the request \(SignatureDoesNotMatch.*Fix: give the trainer host valid keys"):
        refused.put_bytes("k", b"v")
    down = S3Store({"url": f"s3://{BUCKET}/p", "endpoint": "http://127.0.0.1:9"}, tmp_path)
    with pytest.raises(StoreUnavailable, match="unreachable"):
        down.put_bytes("k", b"v")


def test_a_conditional_put_never_replaces_another_object(tmp_path, settings):
    """If-None-Match: * against the real server: the first object under a key stays; the same bytes again are idempotent."""
    from ratchet_trainer.core.store import ObjectExists

    store = S3Store(settings, tmp_path)
    first = store.put_bytes("runs/run/checkpoints/step-0/f", b"winner", if_absent=True)
    assert store.put_bytes("runs/run/checkpoints/step-0/f", b"winner", if_absent=True) == first
    with pytest.raises(ObjectExists):
        store.put_bytes("runs/run/checkpoints/step-0/f", b"stale", if_absent=True)
    assert store.get_bytes(first, "object") == b"winner"


def test_two_saves_of_one_step_through_minio_keep_the_first(tmp_path, settings):
    cfg = make_cfg("tiny")
    a = Trainer("run", cfg)
    samples = make_samples(a.vocab_size)
    a.step(0, load_batch(*on_policy_batch(a, tmp_path, samples, 0)))
    first = save_checkpoint(a, tmp_path / "host-a", 0, S3Store(settings, tmp_path / "ca"))
    with torch.no_grad():  # a replacement trainer whose bytes for the same step differ
        for p in a.trainable_state().values():
            p.add_(1e-3)
    second = save_checkpoint(a, tmp_path / "host-b", 0, S3Store(settings, tmp_path / "cb"))
    assert second == first
    b = Trainer("run", cfg)
    restore_checkpoint(b, first["checkpoint"], S3Store(settings, tmp_path / "cc"))
