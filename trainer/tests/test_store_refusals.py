"""Issue 39, item 4: the trainer's S3 store works mid-run only (openRun checked the store before the run
started), so a store that answers but refuses (keys rotated or expired, the clock skewed, the bucket
gone) is StoreUnavailable, a wait, with the store's error named; a 5xx stays a wait, another 4xx is
neither. botocore's ClientError in its real shape; test_s3_store.py has the real MinIO."""
import pytest
from botocore.exceptions import ClientError, NoCredentialsError

from ratchet_trainer.core.store import S3Store, StoreUnavailable


def _store(tmp_path) -> S3Store:
    return S3Store({"url": "s3://bkt/p", "endpoint": "http://127.0.0.1:9"}, tmp_path)


def _raise(code: str, status: int):
    def fn():
        raise ClientError({"Error": {"Code": code, "Message": f"{code} says no"}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")
    return fn


@pytest.mark.parametrize("code,status,fix", [
    ("InvalidAccessKeyId", 403, "valid keys"),
    ("SignatureDoesNotMatch", 403, "valid keys"),
    ("AccessDenied", 403, "valid keys"),
    ("ExpiredToken", 400, "valid keys"),
    ("RequestTimeTooSkewed", 403, "clock"),
    ("NoSuchBucket", 404, "the bucket is gone"),
])
def test_a_refusal_is_a_wait_naming_the_store_error(tmp_path, code, status, fix):
    with pytest.raises(StoreUnavailable, match=rf"refused the request \({code}: {code} says no\).*waiting-for-store.*Fix: .*{fix}"):
        _store(tmp_path)._call(_raise(code, status))


def test_no_credentials_is_a_wait_too(tmp_path):
    def fn():
        raise NoCredentialsError()
    with pytest.raises(StoreUnavailable, match=r"NoCredentialsError.*waiting-for-store"):
        _store(tmp_path)._call(fn)


def test_a_5xx_is_a_wait_and_another_4xx_is_not(tmp_path):
    with pytest.raises(StoreUnavailable, match="HTTP 503"):
        _store(tmp_path)._call(_raise("SlowDown", 503))
    with pytest.raises(ClientError):
        _store(tmp_path)._call(_raise("InvalidArgument", 400))
