"""A full disk (ENOSPC/EDQUOT) is classified as DiskFull naming the path, for the workflow to wait on."""
from __future__ import annotations

import errno

import pytest
from temporalio.exceptions import ApplicationError

from ratchet_trainer.core.checkpoint import CheckpointError
from ratchet_trainer.core.store import DiskFull, disk_full
from ratchet_trainer.worker import TrainerActivities


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_enospc_and_edquot_are_disk_full_naming_the_path(code):
    err = OSError(code, "No space left on device", "/art/runs/r1/checkpoints/3/model.safetensors")
    full = disk_full(err)
    assert isinstance(full, DiskFull)
    assert full.path == "/art/runs/r1/checkpoints/3/model.safetensors"
    assert "/art/runs/r1/checkpoints/3/model.safetensors" in str(full)
    assert "waiting-for-disk" in str(full)


def test_disk_full_found_in_the_cause_chain():
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device", "/cache/s3/x")
        except OSError as inner:
            raise CheckpointError("writing the checkpoint failed") from inner
    except CheckpointError as e:
        full = disk_full(e)
    assert full is not None and full.path == "/cache/s3/x"


def test_other_os_errors_are_not_disk_full():
    assert disk_full(OSError(errno.EACCES, "Permission denied", "/art/x")) is None
    assert disk_full(FileNotFoundError(errno.ENOENT, "No such file", "/art/x")) is None
    assert disk_full(ValueError("nope")) is None


def test_the_activity_fails_with_type_disk_full_non_retryable():
    err = OSError(errno.ENOSPC, "No space left on device", "/art/runs/r1/checkpoints/3")
    failure = TrainerActivities._disk_full_or_raise(TrainerActivities.__new__(TrainerActivities), err)
    assert isinstance(failure, ApplicationError)
    assert failure.type == "DiskFull"
    assert failure.non_retryable
    assert "/art/runs/r1/checkpoints/3" in failure.message
    # Wrapped in a known error type, it is still DiskFull.
    wrapped = CheckpointError("save failed")
    wrapped.__cause__ = err
    assert TrainerActivities._fail(TrainerActivities.__new__(TrainerActivities), wrapped).type == "DiskFull"


def test_any_other_os_error_propagates_unchanged():
    err = OSError(errno.EACCES, "Permission denied", "/art/x")
    with pytest.raises(OSError) as got:
        TrainerActivities._disk_full_or_raise(TrainerActivities.__new__(TrainerActivities), err)
    assert got.value is err
