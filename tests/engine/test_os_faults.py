"""engine/os_faults.py and engine/fault_report.py: OS faults a person can fix recognised (also inside library
errors), said as one line with the folder, what is needed and what is free; large writes refused before the first
byte; read-only folders told at once (a chmod-0555 folder as a normal user; a patched os.open as root, where
permissions do not stop anything)."""

from __future__ import annotations

import errno
import os
import shutil
from collections import namedtuple
from pathlib import Path

import pytest

from desktop_app.engine import os_faults
from desktop_app.engine.errors import UserError
from desktop_app.engine.fault_report import error_parts, said_as_faults
from desktop_app.engine.os_faults import (
    DiskFault,
    NotEnoughSpace,
    check_free_space,
    check_writable,
    fault_error,
    fault_path,
    fixable,
    free_bytes,
    os_errno,
    size_text,
)

Usage = namedtuple("Usage", "total used free")


def _free(monkeypatch, free: int) -> None:
    """The disk has `free` bytes (shutil.disk_usage, what every free-space check reads)."""
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: Usage(10**12, 10**12 - free, free))


def _read_only(monkeypatch, folder: Path, number: int = errno.EROFS) -> None:
    """Creating a file (os.open with O_CREAT, what tempfile.mkstemp and open(..., "w") do) or a folder inside
    `folder` fails with `number`: the lowest level, so it works as root too."""
    real_open, real_mkdir = os.open, os.mkdir
    inside = str(folder.resolve())

    def fake_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and str(Path(os.fsdecode(path)).resolve()).startswith(inside):
            raise OSError(number, os.strerror(number), os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def fake_mkdir(path, *args, **kwargs):
        if str(Path(os.fsdecode(path)).resolve()).startswith(inside + os.sep):
            raise OSError(number, os.strerror(number), os.fsdecode(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)


def test_sizes_are_said_in_decimal_units():
    assert size_text(512) == "512 bytes"
    assert size_text(2_800_000) == "2.8 MB"
    assert size_text(999_700) == "1.0 MB"  # rounds up into the next unit, never "1000 kB"
    assert size_text(42 * 10**9) == "42 GB"
    assert size_text(1.5 * 10**12) == "1.5 TB"


def test_the_os_error_number_is_found_in_the_exception_its_cause_or_its_text():
    assert os_errno(OSError(errno.ENOSPC, "No space left on device")) == errno.ENOSPC
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert os_errno(wrapped) == errno.EDQUOT
    # safetensors (Rust) says it in its text only
    rust = Exception("Error while serializing: I/O error: No space left on device (os error 28)")
    assert os_errno(rust) == 28
    assert os_errno(ValueError("[Errno 30] Read-only file system: '/mnt/x'")) == errno.EROFS
    assert os_errno(ValueError("Size of available data is not a multiple of the data-type size.")) is None
    assert os_errno(None) is None


def test_fixable_is_what_a_person_can_fix_and_nothing_else():
    for number in (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EFBIG, errno.ENOENT):
        assert fixable(OSError(number, os.strerror(number)))
    assert fixable(Exception("I/O error: No space left on device (os error 28)"))
    assert fixable(DiskFault("x", errno_=0))
    assert not fixable(OSError(errno.EEXIST, "File exists"))
    assert not fixable(OSError(errno.EINVAL, "Invalid argument"))
    assert not fixable(ValueError("a bug"))
    assert not fixable(KeyError("errno"))


def test_a_full_disk_is_one_line_with_the_folder_what_is_needed_and_what_is_free(monkeypatch, tmp_path):
    _free(monkeypatch, 3_000_000)
    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "model.safetensors"))
    fault = fault_error(exc, doing="saving the step 120 checkpoint", needed=500_000_000)
    text = str(fault)
    assert text == (f"saving the step 120 checkpoint failed: the disk is full ({tmp_path / 'model.safetensors'}; "
                    "about 500 MB needed; 3.0 MB free): free some space or choose a folder on another disk")
    assert "\n" not in text and "bug" not in text
    assert isinstance(fault, UserError) and fault.space and fault.errno == errno.ENOSPC
    assert fault.path == tmp_path / "model.safetensors"


def test_each_kind_of_fault_says_what_to_do(tmp_path):
    read_only = str(fault_error(OSError(errno.EROFS, "Read-only file system"), doing="exporting", path=tmp_path))
    assert read_only == f"exporting failed: the disk is read-only ({tmp_path}): choose a folder you can write to"
    denied = fault_error(PermissionError(errno.EACCES, "Permission denied", "/root/x"), doing="writing")
    assert str(denied) == "writing failed: permission denied (/root/x): choose a folder you can write to"
    assert not denied.space
    gone = str(fault_error(FileNotFoundError(errno.ENOENT, "No such file", "/data/train.bin"), doing="training"))
    assert gone.endswith("(/data/train.bin): put it back (or reconnect its drive), then try again")
    # a DiskFault passes through as it is
    fault = DiskFault("already said", errno_=errno.ENOSPC)
    assert fault_error(fault, doing="other") is fault


def test_the_path_is_taken_from_the_exception_or_its_cause(tmp_path):
    outer = RuntimeError("wrapped")
    outer.__cause__ = OSError(errno.ENOSPC, "full", str(tmp_path / "a.bin"))
    assert fault_path(outer) == tmp_path / "a.bin"
    assert fault_path(ValueError("no path")) is None


def test_free_bytes_looks_at_the_nearest_existing_folder_and_is_none_when_unknown(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(shutil, "disk_usage", lambda p: seen.append(Path(p)) or Usage(100, 40, 60))
    assert free_bytes(tmp_path / "not" / "yet") == 60
    assert seen == [tmp_path]

    def broken(_p):
        raise OSError(errno.EIO, "I/O error")

    monkeypatch.setattr(shutil, "disk_usage", broken)
    assert free_bytes(tmp_path) is None


def test_a_large_write_is_refused_before_the_first_byte(monkeypatch, tmp_path):
    _free(monkeypatch, 100_000_000)
    with pytest.raises(NotEnoughSpace) as info:
        check_free_space(tmp_path, 2_000_000_000, "the GGUF export")
    assert str(info.value) == (f"the GGUF export needs about 2.0 GB but only 100 MB is free in {tmp_path}: free some "
                               "space or choose a folder on another disk")
    assert info.value.needed == 2_000_000_000 and info.value.free == 100_000_000 and info.value.space
    check_free_space(tmp_path, 50_000_000, "a small file")  # fits with the margin
    with pytest.raises(NotEnoughSpace, match=r"needs about 95 MB plus the 17 MB the disk must keep free, but only "
                       r"100 MB is free"):  # fits the free space but not with the file system's margin
        check_free_space(tmp_path, 95_000_000, "a file")
    monkeypatch.setattr(os_faults, "free_bytes", lambda _f: None)
    check_free_space(tmp_path, 10**15, "unknown free space passes")  # the write itself then says it


def test_a_writable_folder_passes_and_is_created(tmp_path):
    check_writable(tmp_path / "new" / "folder", "the workspace")
    assert (tmp_path / "new" / "folder").is_dir()
    assert list((tmp_path / "new" / "folder").iterdir()) == []  # the probe file is gone


@pytest.mark.parametrize("number, words", [(errno.EROFS, "the disk is read-only"),
                                           (errno.EACCES, "permission denied")])
def test_a_read_only_folder_is_said_at_once(monkeypatch, tmp_path, number, words):
    folder = tmp_path / "media"
    folder.mkdir()
    _read_only(monkeypatch, folder, number)
    with pytest.raises(DiskFault) as info:
        check_writable(folder, "the workspace")
    assert str(info.value) == f"writing to the workspace failed: {words} ({folder}): choose a folder you can write to"


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a 0555 folder anyway")
def test_a_folder_without_write_permission_is_said_at_once(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        with pytest.raises(DiskFault, match="permission denied"):
            check_writable(folder, "the workspace")
    finally:
        folder.chmod(0o755)


def test_error_parts_gives_a_traceback_only_for_a_bug():
    assert error_parts(UserError("bad setting")) == ("bad setting", "")
    message, details = error_parts(OSError(errno.ENOSPC, "No space left on device", "/data/x"), "Saving")
    assert message.startswith("Saving failed: the disk is full (/data/x") and details == ""
    try:
        raise ValueError("unexpected")
    except ValueError as exc:
        message, details = error_parts(exc)
    assert message == "ValueError: unexpected" and "Traceback" in details


def test_said_as_faults_names_the_work_after_the_generators_cleanup(tmp_path):
    cleaned = []

    @said_as_faults("preparing the dataset")
    def job(fail: BaseException):
        try:
            yield 1
            raise fail
        finally:
            cleaned.append(True)

    gen = job(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "train.bin")))
    assert next(gen) == 1
    with pytest.raises(DiskFault) as info:
        next(gen)
    assert str(info.value).startswith(f"preparing the dataset failed: the disk is full ({tmp_path / 'train.bin'}")
    assert isinstance(info.value.__cause__, OSError) and cleaned == [True]
    with pytest.raises(ValueError):  # anything else passes unchanged
        list(job(ValueError("a bug")))
    with pytest.raises(UserError, match=r"^bad$"):
        list(job(UserError("bad")))
