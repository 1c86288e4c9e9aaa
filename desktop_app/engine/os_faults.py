"""Operating-system faults a person can fix, said as one line: a full disk, an exceeded quota, a read-only disk, a
folder without permission, a file too big for its file system, a file or folder that vanished (stdlib only).

Every front end shows these the same way: `fixable(exc)` recognises one (an OSError, or a library error that wraps
one, such as safetensors' "I/O error: No space left on device (os error 28)"), `fault_error(exc, doing=...)` turns it
into a `DiskFault` (a UserError: one line, exit 2, never "a bug"), `check_free_space` refuses a large write before
the first byte when the size is known, and `check_writable` tells a read-only or forbidden folder at once.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import tempfile
from pathlib import Path

from desktop_app.engine.errors import UserError

# errno -> what the person reads; each is something they can fix without us
FIXABLE_ERRNOS: dict[int, str] = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is exceeded",
    errno.EROFS: "the disk is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EFBIG: "the file is larger than its file system allows",
    errno.ENOENT: "it no longer exists (deleted, moved, or its drive was removed)",
    errno.ENOTDIR: "a folder on its path no longer exists",
    errno.ESTALE: "its network drive went away",
}
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
_OS_ERROR_IN_TEXT = re.compile(r"\(os error (\d+)\)|\[Errno (\d+)\]|errno[ =:]+(\d+)", re.IGNORECASE)
_DECIMAL = (("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3))


def size_text(n: float) -> str:
    """Bytes in decimal units, as file managers and the Hub write them: 2_800_000 -> '2.8 MB', 512 -> '512 bytes'."""
    for unit, scale in _DECIMAL:
        value = n / scale
        if abs(value) >= 0.9995:  # what rounds to 1.0 or more of this unit
            return f"{value:.1f} {unit}" if abs(value) < 9.95 else f"{value:.0f} {unit}"
    return f"{int(n)} bytes"


class DiskFault(UserError):
    """A write or read the operating system refused for a reason the person can fix. `errno` is the OS error
    number, `path` the file or folder concerned (or None), `space` whether freeing space (or another disk) fixes it."""

    def __init__(self, message: str, *, errno_: int, path: str | os.PathLike[str] | None = None) -> None:
        super().__init__(message)
        self.errno = errno_
        self.path = Path(path) if path is not None else None

    @property
    def space(self) -> bool:
        return self.errno in SPACE_ERRNOS


class NotEnoughSpace(DiskFault):
    """Refused before writing: the size was known and the disk has less free."""

    def __init__(self, what: str, folder: Path, needed: int, free: int, margin: int = 0) -> None:
        self.needed, self.free = needed, free
        # more free than the write itself needs: say what else must stay free, or the numbers contradict each other
        kept = f" plus the {size_text(margin)} the disk must keep free," if free >= needed and margin else ""
        super().__init__(f"{what} needs about {size_text(needed)}{kept} but only {size_text(free)} is free in "
                         f"{folder}: free some space or choose a folder on another disk", errno_=errno.ENOSPC,
                         path=folder)


def os_errno(exc: BaseException | None) -> int | None:
    """The OS error number behind `exc`: its own errno, a wrapped cause's, or one named in its text (safetensors and
    other Rust/C libraries say "(os error 28)"); None when there is none."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno:
            return int(exc.errno)
        match = _OS_ERROR_IN_TEXT.search(str(exc))
        if match:
            return int(next(g for g in match.groups() if g))
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return None


def fixable(exc: BaseException) -> bool:
    """Whether `exc` is (or wraps) an OS fault the person can fix (FIXABLE_ERRNOS)."""
    if isinstance(exc, DiskFault):
        return True
    number = os_errno(exc)
    return number is not None and number in FIXABLE_ERRNOS


def fault_path(exc: BaseException) -> Path | None:
    """The file an OSError (or its wrapped cause) names, if any."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, DiskFault):
            return exc.path
        if isinstance(exc, OSError) and exc.filename:
            return Path(os.fsdecode(exc.filename))
        exc = exc.__cause__ or exc.__context__  # type: ignore[assignment]
        seen += 1
    return None


def free_bytes(folder: str | os.PathLike[str]) -> int | None:
    """Free bytes on the disk that holds `folder` (or its nearest existing parent); None when unknown."""
    probe = Path(folder).expanduser()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return int(shutil.disk_usage(probe).free)
    except OSError:
        return None


def fault_error(exc: BaseException, *, doing: str, path: str | os.PathLike[str] | None = None,
                needed: int | None = None) -> DiskFault:
    """`exc` (a fixable fault) as one line: "<doing> failed: <what> (<path>; <needed>, <free> free)". `doing` names
    the work ("saving the step 120 checkpoint"), `path` the file or folder when the exception does not."""
    if isinstance(exc, DiskFault):
        return exc
    number = os_errno(exc) or 0
    where = Path(path) if path is not None else fault_path(exc)
    what = FIXABLE_ERRNOS.get(number) or (getattr(exc, "strerror", None) or str(exc).strip().splitlines()[0][:200])
    details = [str(where)] if where is not None else []
    if number in SPACE_ERRNOS:
        if needed:
            details.append(f"about {size_text(needed)} needed")
        free = free_bytes(where) if where is not None else None
        if free is not None:
            details.append(f"{size_text(free)} free")
    detail = f" ({'; '.join(details)})" if details else ""
    return DiskFault(f"{doing} failed: {what}{detail}{_advice(number)}", errno_=number, path=where)


def _advice(number: int) -> str:
    if number in SPACE_ERRNOS:
        return ": free some space or choose a folder on another disk"
    if number in (errno.EROFS, errno.EACCES, errno.EPERM):
        return ": choose a folder you can write to"
    if number in (errno.ENOENT, errno.ENOTDIR, errno.ESTALE):
        return ": put it back (or reconnect its drive), then try again"
    return ""


def check_free_space(folder: str | os.PathLike[str], needed: int, what: str, *, margin: int = 16 << 20) -> None:
    """Refuse a write of about `needed` bytes into `folder` before the first byte when the disk has less free
    (plus `margin`, what file systems keep for themselves); `what` names it ("the GGUF export"). Unknown free space
    passes (the write itself then reports a full disk)."""
    free = free_bytes(folder)
    if free is not None and needed > 0 and free < needed + margin:
        probe = Path(folder).expanduser()
        raise NotEnoughSpace(what, probe, needed, free, margin)


def check_writable(folder: str | os.PathLike[str], what: str = "the folder") -> None:
    """Raise DiskFault when `folder` (created if missing) cannot take a new file: read-only media, no permission."""
    target = Path(folder).expanduser()
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".azr-write-check-", dir=target)
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(probe)
    except OSError as exc:
        if not fixable(exc):
            raise
        raise fault_error(exc, doing=f"writing to {what}", path=target) from exc
