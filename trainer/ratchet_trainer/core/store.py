"""The artifact store as the trainer sees it: `file://` refs on a shared disk, or
`s3://bucket/key` refs in any S3-compatible store (AWS S3, MinIO) through boto3.

The run's `[artifacts]` settings (url, endpoint, region, force_path_style; never
credentials, which come from boto3's default chain) arrive in each activity's
`store` field, so a trainer host needs no disk shared with the other workers.
Same integrity rules as src/artifacts/s3.ts: every object carries its sha256 as
metadata (and as the S3 checksum the server verifies on write), every read is
re-hashed, and a directory artifact is committed by writing MANIFEST.sha256 last.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import logging
import os
import re
import shutil
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from .artifacts import MANIFEST, ArtifactError, ArtifactRef, commit_dir, sha256_file, verify_dir, verify_file
from .io_progress import CountingBody, read_all

log = logging.getLogger(__name__)

SHA_META = "sha256"


class StoreUnavailable(RuntimeError):
    """The store cannot be reached now; the workflow waits (waiting-for-store) and retries."""


class ObjectExists(RuntimeError):
    """A conditional put (If-None-Match: *) found another object, with other bytes, already under the key:
    another writer (a partitioned trainer's stale save, or its replacement's) got there first."""

    def __init__(self, uri: str, ours: str, theirs: str | None):
        super().__init__(f"{uri} already holds another object (sha256 {theirs or 'unknown'}, ours {ours}); "
                         "a conditional put never replaces it")
        self.uri = uri


class StoreConfigError(ValueError):
    """A wrong setting (bucket, credentials): retrying cannot help."""


_KEYS_FIX = ("give the trainer host valid keys again (rotated or expired keys or token: update them where the SDK "
             "reads them; a worker that reads them from its environment needs a restart), allowed to read and write the bucket")
# A store that answered but refused: mid-run an operator fixes it (keys, clock, bucket), so the run waits.
_REFUSED = {
    "NoSuchBucket": "the bucket is gone: restore it, or recreate it and put back the run's objects (runs/<run>/) from a backup",
    "RequestTimeTooSkewed": "sync this host's clock (chronyc makestep, or systemd-timesyncd)",
    **{c: _KEYS_FIX for c in ("InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "Forbidden", "403", "ExpiredToken",
                              "ExpiredTokenException", "InvalidToken", "TokenRefreshRequired", "InvalidClientTokenId")},
}

# "No space left on device" and "Disk quota exceeded": an operator frees space, the run resumes.
_DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class DiskFull(RuntimeError):
    """A write found its disk full; the workflow waits (waiting-for-disk) and retries."""

    def __init__(self, path: str, detail: str):
        super().__init__(
            f"disk full writing {path} ({detail}). The run waits (status waiting-for-disk) and resumes "
            "when space is freed. Fix: free space on that filesystem (old checkpoints under runs/, the S3 "
            "download cache .cache/s3), or raise the quota")
        self.path = path


def disk_full(err: BaseException) -> DiskFull | None:
    """The DiskFull an exception is, or was caused by (ENOSPC/EDQUOT anywhere in its chain); None otherwise."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, DiskFull):
            return e
        if isinstance(e, OSError) and e.errno in _DISK_FULL_ERRNOS:
            return DiskFull(str(e.filename or "an unknown path"), f"{errno.errorcode.get(e.errno, e.errno)}: {e.strerror}")
        e = e.__cause__ or e.__context__
    return None


# The S3 download cache (<cache root>/<bucket>/<object key>/<sha256[:16]>/, one entry per directory artifact) is an
# LRU bounded by bytes: without a bound a long run fills the trainer's disk with every checkpoint it ever loaded.
CACHE_LIMIT_ENV = "RATCHET_CACHE_MAX_GIB"
DEFAULT_CACHE_GIB = 20.0
# An entry used this recently may still be read by the call that fetched it (a load verifies the checkpoint, then
# restores from it; another rank or process of the host may read it too): never evicted, whatever the bound.
CACHE_IN_USE_S = 600
_ENTRY = re.compile(r"^[0-9a-f]{16}$")


def cache_limit_bytes() -> int:
    """The cache's bound: $RATCHET_CACHE_MAX_GIB (GiB, may be fractional), else 20 GiB."""
    raw = os.environ.get(CACHE_LIMIT_ENV, "").strip()
    if not raw:
        return int(DEFAULT_CACHE_GIB * 2**30)
    try:
        gib = float(raw)
    except ValueError:
        gib = -1.0
    if not gib >= 0:
        raise StoreConfigError(f"{CACHE_LIMIT_ENV}={raw!r} is not a size in GiB >= 0. Fix: e.g. {CACHE_LIMIT_ENV}=20 "
                               "(0 keeps only what is in use)")
    return int(gib * 2**30)


def cache_entries(root: Path) -> list[tuple[Path, int, float]]:
    """(entry, bytes, last used) for every committed entry under the cache root, least recently used first."""
    out: list[tuple[Path, int, float]] = []
    for dirpath, dirnames, _ in os.walk(root):
        for name in list(dirnames):
            entry = Path(dirpath) / name
            if ".tmp-" in name:  # a download (or an eviction) in progress: not ours to judge
                dirnames.remove(name)
            elif _ENTRY.match(name) and (entry / MANIFEST).is_file():
                dirnames.remove(name)
                size = sum((Path(d) / f).stat().st_size for d, _, fs in os.walk(entry) for f in fs)
                out.append((entry, size, entry.stat().st_mtime))
    return sorted(out, key=lambda e: e[2])


def prune_cache(root: Path, limit: int, keep: set[Path] | frozenset[Path] = frozenset(), now: float | None = None) -> list[tuple[Path, int]]:
    """Evicts least recently used entries until the cache holds at most `limit` bytes, sparing `keep` and every
    entry used in the last CACHE_IN_USE_S seconds. Returns what went. An entry is renamed away before it is
    deleted, so a reader finds it whole or not at all (and fetches it again)."""
    now = time.time() if now is None else now
    entries = cache_entries(root)
    total = sum(size for _, size, _ in entries)
    gone: list[tuple[Path, int]] = []
    for entry, size, used in entries:
        if total <= limit:
            break
        if entry in keep or now - used < CACHE_IN_USE_S:
            continue
        doomed = entry.parent / f".{entry.name}.tmp-evict-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(entry, doomed)
        except OSError:
            continue  # another process evicted or replaced it first
        shutil.rmtree(doomed, ignore_errors=True)
        total -= size
        gone.append((entry, size))
        for parent in entry.parents:  # the object key's now empty folders
            if parent == root or root not in parent.parents:
                break
            try:
                parent.rmdir()
            except OSError:
                break
    if gone:
        log.info("S3 download cache: evicted least recently used entries",
                 extra={"cache": str(root), "evicted": len(gone), "bytes": sum(b for _, b in gone), "held_bytes": total, "limit_bytes": limit})
    return gone


def _manifest_entries(text: str) -> list[tuple[str, str]]:
    out = []
    for line in text.splitlines():
        if "  " in line:
            digest, rel = line.strip().split("  ", 1)
            out.append((digest, rel))
    return out


class S3Store:
    def __init__(self, settings: dict[str, Any], cache_root: Path):
        import boto3
        from botocore.config import Config

        url = settings["url"]
        parsed = urlparse(url)
        self.bucket = parsed.netloc
        self.prefix = parsed.path.strip("/")
        self.url = f"s3://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")
        self.endpoint = settings.get("endpoint")
        path_style = settings.get("force_path_style")
        if path_style is None:
            path_style = self.endpoint is not None
        self.cache_root = cache_root
        self.client = boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            region_name=settings.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
            config=Config(
                s3={"addressing_style": "path" if path_style else "auto"},
                connect_timeout=5, read_timeout=120, retries={"max_attempts": 2, "mode": "standard"},
            ),
        )

    # ---- keys and uris ----
    def object_key(self, key: str) -> str:
        key = key.strip("/")
        if ".." in key.split("/"):
            raise ArtifactError(f"artifact key {key!r} escapes the store root")
        return f"{self.prefix}/{key}" if self.prefix else key

    def uri_of(self, object_key: str) -> str:
        return f"s3://{self.bucket}/{object_key}"

    def key_of_uri(self, uri: str) -> str:
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or parsed.netloc != self.bucket:
            raise ArtifactError(f"artifact {uri} is not in this run's store {self.url}. Fix: read it with the store that wrote it")
        return parsed.path.lstrip("/")

    # ---- error mapping ----
    def _call(self, fn, *args, **kwargs):
        from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

        where = f" at {self.endpoint}" if self.endpoint else ""
        try:
            return fn(*args, **kwargs)
        except NoCredentialsError as e:
            # The trainer works mid-run only (openRun checked the store before the run started): a refusal is a wait.
            raise StoreUnavailable(f"artifact store {self.url}{where} refused the request (NoCredentialsError: {e}). The run waits "
                                   "(status waiting-for-store). Fix: give the trainer host credentials again (AWS_ACCESS_KEY_ID / "
                                   "AWS_SECRET_ACCESS_KEY, AWS_PROFILE's file, the instance role)") from e
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if code in ("NoSuchKey", "404", "NotFound"):
                raise FileNotFoundError(code) from e
            if code in _REFUSED or status == 403:
                raise StoreUnavailable(f"artifact store {self.url}{where} refused the request ({code or status}: "
                                       f"{e.response.get('Error', {}).get('Message', '')}). The run waits (status waiting-for-store). "
                                       f"Fix: {_REFUSED.get(code, _REFUSED['AccessDenied'])}") from e
            if status >= 500:
                raise StoreUnavailable(f"artifact store {self.url}{where} answered HTTP {status} ({code}); the run waits for it") from e
            raise
        except (EndpointConnectionError, BotoCoreError) as e:
            raise StoreUnavailable(f"artifact store {self.url}{where} is unreachable: {e}. The run waits (status waiting-for-store). "
                                   "Fix: start the store, or check [artifacts] endpoint and the network") from e

    # ---- objects ----
    def put_bytes(self, key: str, data: bytes, *, if_absent: bool = False) -> ArtifactRef:
        """Writes data under key. With if_absent, a conditional put (`If-None-Match: *`): the object is
        written only where none is; an object already there with the same bytes is this write
        (idempotent), one with other bytes raises ObjectExists and is left as it was."""
        from botocore.exceptions import ClientError

        ok = self.object_key(key)
        digest = hashlib.sha256(data).hexdigest()
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self._call(self.client.put_object, Bucket=self.bucket, Key=ok, Body=CountingBody(data),
                       ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode(), Metadata={SHA_META: digest}, **extra)
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
            if not if_absent or not (code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412)):
                raise
            theirs = self._sha_of(ok)
            if theirs is None and (code == "ConditionalRequestConflict" or status == 409):
                raise StoreUnavailable(f"{self.uri_of(ok)}: a concurrent conditional write is in progress; retry") from e
            if theirs != digest:
                raise ObjectExists(self.uri_of(ok), digest, theirs) from e
        return {"uri": self.uri_of(ok), "sha256": digest, "bytes": len(data)}

    def _sha_of(self, object_key: str) -> str | None:
        """The sha256 of the object under a key: its metadata, else its bytes re-hashed; None if absent."""
        try:
            head = self._call(self.client.head_object, Bucket=self.bucket, Key=object_key)
        except FileNotFoundError:
            return None
        meta = (head.get("Metadata") or {}).get(SHA_META)
        if meta:
            return meta
        data = self._get(object_key)
        return None if data is None else hashlib.sha256(data).hexdigest()

    def _get(self, object_key: str) -> bytes | None:
        try:
            res = self._call(self.client.get_object, Bucket=self.bucket, Key=object_key)
        except FileNotFoundError:
            return None
        return read_all(res["Body"])

    def get_bytes(self, ref: ArtifactRef, what: str) -> bytes:
        data = self._get(self.key_of_uri(ref["uri"]))
        if data is None:
            raise ArtifactError(f"{what} {ref['uri']} does not exist. Fix: re-run the activity that wrote it")
        actual = hashlib.sha256(data).hexdigest()
        if actual != ref["sha256"]:
            raise ArtifactError(f"{what} {ref['uri']} is corrupt: recorded sha256 {ref['sha256']}, found {actual}. "
                                "Fix: re-run the activity that produced it")
        return data

    def put_dir(self, key: str, root: Path) -> ArtifactRef:
        """Uploads root (which has its MANIFEST.sha256) under key: every file, the manifest last."""
        man = root / MANIFEST
        total = 0
        for digest, rel in _manifest_entries(man.read_text()):
            data = (root / rel).read_bytes()
            if hashlib.sha256(data).hexdigest() != digest:
                raise ArtifactError(f"{root}/{rel} changed while uploading: its sha256 is not the manifest's")
            self.put_bytes(f"{key}/{rel}", data)
            total += len(data)
        ref = self.put_bytes(f"{key}/{MANIFEST}", man.read_bytes())
        return {"uri": self.uri_of(self.object_key(key)), "sha256": ref["sha256"], "bytes": total}

    def dir_ref(self, key: str) -> ArtifactRef | None:
        """The ref of a committed directory artifact (its manifest is there), or None."""
        ok = self.object_key(key)
        man = self._get(f"{ok}/{MANIFEST}")
        if man is None:
            return None
        total = 0
        for _, rel in _manifest_entries(man.decode()):
            head = self._call(self.client.head_object, Bucket=self.bucket, Key=f"{ok}/{rel}")
            total += int(head["ContentLength"])
        return {"uri": self.uri_of(ok), "sha256": hashlib.sha256(man).hexdigest(), "bytes": total}

    def fetch_dir(self, ref: ArtifactRef, what: str) -> Path:
        """A verified local copy of a directory artifact, cached by its manifest's hash. Each use marks the entry
        used (its mtime); each download then bounds the cache (prune_cache), the entry just fetched kept."""
        ok = self.key_of_uri(ref["uri"])
        dest = self.cache_root / self.bucket / ok / ref["sha256"][:16]
        try:
            got = verify_dir({**ref, "uri": dest.as_uri()}, what)
            os.utime(got)
            return got
        except (ArtifactError, OSError):
            pass
        man = self._get(f"{ok}/{MANIFEST}")
        if man is None:
            raise ArtifactError(f"{what} {ref['uri']} has no {MANIFEST} (not committed). Fix: point at a checkpoint written by trainer.save")
        actual = hashlib.sha256(man).hexdigest()
        if actual != ref["sha256"]:
            raise ArtifactError(f"{what} {ref['uri']} is corrupt: recorded sha256 {ref['sha256']}, found {actual} for {MANIFEST}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            for digest, rel in _manifest_entries(man.decode()):
                data = self._get(f"{ok}/{rel}")
                got = hashlib.sha256(data).hexdigest() if data is not None else "missing"
                if got != digest:
                    raise ArtifactError(f"{what} {ref['uri']}: file {rel} has sha256 {got}, manifest says {digest}")
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                (tmp / rel).write_bytes(data)  # type: ignore[arg-type]
            (tmp / MANIFEST).write_bytes(man)
            if dest.exists():
                shutil.rmtree(dest, ignore_errors=True)
            commit_dir(tmp, dest)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        got = verify_dir({**ref, "uri": dest.as_uri()}, what)
        os.utime(got)
        prune_cache(self.cache_root, cache_limit_bytes(), keep={got})
        return got


def store_for(settings: dict[str, Any] | None, cache_root: Path) -> S3Store | None:
    """The run's S3 store, or None when the run uses file:// (the local/shared-disk store)."""
    if not settings or not isinstance(settings.get("url"), str) or not settings["url"].startswith("s3://"):
        return None
    key = repr(sorted(settings.items()))
    cached = _STORES.get(key)
    if cached is None:
        cached = _STORES[key] = S3Store(settings, cache_root)
    return cached


_STORES: dict[str, S3Store] = {}


def read_file_ref(ref: ArtifactRef, what: str, store: S3Store | None) -> bytes:
    """The verified bytes of a file artifact, from disk or S3 by its uri."""
    if ref["uri"].startswith("s3://"):
        if store is None:
            raise ArtifactError(f"{what} {ref['uri']} is in S3, but the activity carried no store settings. "
                                "Fix: pass the run's [artifacts] settings as `store`")
        return store.get_bytes(ref, what)
    return verify_file(ref, what).read_bytes()


def local_dir_ref(ref: ArtifactRef, what: str, store: S3Store | None) -> Path:
    """A verified local directory for a directory artifact (a cache copy for S3)."""
    if ref["uri"].startswith("s3://"):
        if store is None:
            raise ArtifactError(f"{what} {ref['uri']} is in S3, but the activity carried no store settings. "
                                "Fix: pass the run's [artifacts] settings as `store`")
        return store.fetch_dir(ref, what)
    return verify_dir(ref, what)


__all__ = ["CACHE_LIMIT_ENV", "DiskFull", "cache_entries", "cache_limit_bytes", "prune_cache", "ObjectExists", "S3Store", "StoreConfigError", "StoreUnavailable", "disk_full", "local_dir_ref", "read_file_ref", "sha256_file", "store_for"]
