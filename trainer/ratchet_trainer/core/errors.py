"""Errors that several core modules raise, kept apart so those modules need not import each other.

checkpoint.py and sharded.py both refuse a checkpoint that does not fit: with the error here,
sharded.py (the DCP layer) no longer imports checkpoint.py, which imports it.
"""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint that does not belong to this run or model; nothing was changed."""
