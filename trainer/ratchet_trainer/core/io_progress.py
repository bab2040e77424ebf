"""Checkpoint I/O reports its progress while it copies: bytes so far (issue 39, hole 7).

A save or load of a large checkpoint (full fine-tuning, a slow store) can outlast the trainer's
stall window (`trainer_stall_s`); with no progress from the activity meanwhile, its watchdog
fenced a healthy trainer on every try. The activity opens `io_progress(live.progress, phase)`
around its I/O, and every copy loop below it (hashing, uploading, downloading, writing the
cache) calls `io_bytes(n)` per chunk: each call is progress, with the running byte count as
the heartbeat's details. The meter lives in a contextvar of the activity's thread, so the core
modules need no callback argument and run unchanged outside an activity.
"""

from __future__ import annotations

import contextlib
import contextvars
import io
from collections.abc import Callable, Iterator
from typing import Any

CHUNK = 1 << 20


class _Meter:
    def __init__(self, report: Callable[[Any], None], phase: str, extra: dict[str, Any]) -> None:
        self.report = report
        self.phase = phase
        self.extra = extra
        self.bytes = 0

    def add(self, n: int) -> None:
        self.bytes += n
        self.report({"phase": self.phase, **self.extra, "bytes": self.bytes})


_meter: contextvars.ContextVar[_Meter | None] = contextvars.ContextVar("ratchet_io_meter", default=None)


@contextlib.contextmanager
def io_progress(report: Callable[[Any], None], phase: str, **extra: Any) -> Iterator[None]:
    """Within the block, every chunk of checkpoint I/O on this thread calls report({phase, **extra, bytes})."""
    token = _meter.set(_Meter(report, phase, extra))
    try:
        yield
    finally:
        _meter.reset(token)


def io_bytes(n: int) -> None:
    """n more bytes copied (hashed, read, written); a no-op outside io_progress."""
    meter = _meter.get()
    if meter is not None:
        meter.add(n)


def read_all(body: Any) -> bytes:
    """A stream's bytes, read a chunk at a time so each chunk counts as progress."""
    parts = []
    for chunk in iter(lambda: body.read(CHUNK), b""):
        io_bytes(len(chunk))
        parts.append(chunk)
    return b"".join(parts)


class CountingBody(io.BytesIO):
    """An upload body whose reads count as progress (the HTTP client reads it a chunk at a time)."""

    def read(self, n: int | None = -1) -> bytes:
        chunk = super().read(n)
        if chunk:
            io_bytes(len(chunk))
        return chunk
