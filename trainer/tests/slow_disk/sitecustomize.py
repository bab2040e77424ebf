"""A slow disk for the trainer tests (on PYTHONPATH only where a test puts it): every read of a file whose
path contains RATCHET_TEST_SLOW_READ_UNDER, asking for 64 KiB or more (hashing, copying), first sleeps
RATCHET_TEST_SLOW_READ_S seconds. It slows today's code and any other alike, so a test of checkpoint I/O's
progress does not depend on a hook in the code it tests. With RATCHET_TEST_SLOW_READ_UNTIL (epoch seconds), reads
are slow only until then (the soak's slow-save incident: the disk recovers, the process goes on)."""

import builtins
import os
import time

_under = os.environ.get("RATCHET_TEST_SLOW_READ_UNDER")
_sleep = float(os.environ.get("RATCHET_TEST_SLOW_READ_S", "0") or 0)
_until = float(os.environ.get("RATCHET_TEST_SLOW_READ_UNTIL", "0") or 0)

if _under and _sleep:
    _open = builtins.open

    class _SlowReader:
        def __init__(self, f):
            self._f = f

        def read(self, n=-1):
            if (n is None or n < 0 or n >= 1 << 16) and (not _until or time.time() < _until):
                time.sleep(_sleep)
            return self._f.read(n)

        def __getattr__(self, name):
            return getattr(self._f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return self._f.__exit__(*exc)

        def __iter__(self):
            return iter(self._f)

    def _slow_open(file, mode="r", *args, **kwargs):
        f = _open(file, mode, *args, **kwargs)
        if "r" in mode and "b" in mode and isinstance(file, (str, os.PathLike)) and _under in os.fspath(file):
            return _SlowReader(f)
        return f

    builtins.open = _slow_open
