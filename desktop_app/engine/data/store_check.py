"""Is a prepared dataset's token store still what `prepare` committed? (numpy-free, stdlib only)

`prepare` records each token file's committed size and blake2b checksum in the manifest ("files"). Policy:
- sizes are checked every time a store's stream is opened (one stat: free), so a truncated file is refused by every
  reader with one line naming it, never numpy's "Size of available data is not a multiple of the data-type size";
- checksums are checked when a training run starts (WindowBatchSource), because a full hash costs about a second
  per GB. The verified (size, mtime, ctime, inode) of each file is remembered in `.verified.json` beside the manifest,
  so the next run over an unchanged file starts at once; any write to the file changes its ctime and forces a new
  hash. (A silent disk error that changes neither is caught only when the remembered entry is absent.)
- stores prepared before checksums existed carry no "files" entry: they are checked by size only, silently.
- during a run, `StreamWatch` stats the file before each batch: deleted, moved, replaced or cut short stops the run
  with one line; the windows are then read with plain reads (TokenStore.read_windows), so a cut in between is a
  short read with the same line, never a SIGBUS.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.os_faults import DiskFault, size_text

CHECKSUM = "blake2b"
VERIFIED_NAME = ".verified.json"
_BLOCK = 8 << 20


class DamagedData(UserError):
    """A dataset file no longer holds what `prepare` committed (cut short, altered). `path` is the file."""

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path


def new_hash() -> Any:
    """The running checksum the token writer feeds while it appends (what `file_checksum` computes)."""
    return hashlib.blake2b(digest_size=32)


def hash_prefix(path: Path, nbytes: int, into: Any | None = None) -> Any:
    """Feed the first `nbytes` bytes of `path` into `into` (a new checksum when None) and return it."""
    h = into if into is not None else new_hash()
    left = nbytes
    with open(path, "rb") as fh:
        while left > 0:
            block = fh.read(min(_BLOCK, left))
            if not block:
                break
            h.update(block)
            left -= len(block)
    return h


def committed_bytes(manifest: dict[str, Any], split: str, itemsize: int) -> int:
    """Bytes of `<split>.bin` the manifest committed (its token count x the token size)."""
    tokens = manifest.get("splits", {}).get(split, {}).get("tokens", 0)
    return int(tokens) * itemsize if isinstance(tokens, int) else 0


def _damaged(file: Path, what: str) -> DamagedData:
    return DamagedData(f"the dataset file {file} {what} (a copy interrupted, a disk error, or an edit): restore it "
                       "from a backup or prepare the dataset again", file)


def check_size(file: Path, needed: int) -> int:
    """The size of `file`; DamagedData when it holds fewer than the `needed` committed bytes, DiskFault when it is
    gone. A longer file is fine: an interrupted append leaves a tail that readers ignore."""
    try:
        size = file.stat().st_size
    except FileNotFoundError:
        if needed == 0:
            return 0
        raise DiskFault(f"the dataset file {file} is missing (deleted or moved): put it back, or prepare the dataset "
                        "again", errno_=errno.ENOENT, path=file) from None
    if size < needed:
        raise _damaged(file, f"is cut short: {size_text(size)} of the {size_text(needed)} prepared")
    return size


def stat_key(file: Path) -> list[int]:
    """What changes when a file is written to or replaced: its size, modification and change times, and inode."""
    st = file.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def _remembered(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / VERIFIED_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _remember(folder: Path, verified: dict[str, Any]) -> None:
    # A read-only dataset (shared media) is fine: the next run simply hashes again.
    with contextlib.suppress(OSError):
        atomic_write_text(folder / VERIFIED_NAME, json.dumps(verified, indent=1) + "\n")


def verify_files(folder: Path, manifest: dict[str, Any], *, remember: bool = True) -> None:
    """Sizes, then checksums, of the token files the manifest records ("files": name -> size, blake2b); files it
    does not record are checked by size by the reader. Unchanged files verified before are not hashed again;
    `remember` False leaves the folder untouched (an append, which changes the checksums anyway)."""
    files = manifest.get("files")
    if not isinstance(files, dict):
        return  # prepared before checksums were recorded
    remembered, changed = _remembered(folder), False
    for name, entry in files.items():
        if not isinstance(entry, dict) or CHECKSUM not in entry:
            continue
        file = folder / name
        check_size(file, int(entry.get("size", 0)))
        key = stat_key(file)
        known = remembered.get(name)
        if isinstance(known, dict) and known.get("stat") == key and known.get(CHECKSUM) == entry[CHECKSUM]:
            continue
        if hash_prefix(file, int(entry["size"])).hexdigest() != entry[CHECKSUM]:
            raise _damaged(file, "has changed since it was prepared (its checksum differs)")
        remembered[name] = {"stat": key, CHECKSUM: entry[CHECKSUM]}
        changed = True
    if changed and remember:
        _remember(folder, remembered)


class StreamWatch:
    """The token file a run reads through its memory map: `check()` (one stat, before each batch) raises when the
    file at that path was deleted, moved, replaced or cut short since the run opened it."""

    def __init__(self, file: Path, needed: int) -> None:
        self.file = file
        self.needed = needed
        st = file.stat()
        self.identity = (st.st_dev, st.st_ino)

    def check(self) -> None:
        try:
            st = self.file.stat()
        except OSError:
            raise DiskFault(f"the dataset file {self.file} was deleted or moved during the run: put it back, then "
                            "resume the run from its last checkpoint", errno_=errno.ENOENT, path=self.file) from None
        if (st.st_dev, st.st_ino) != self.identity or st.st_size < self.needed:
            raise cut_short(self.file)


def cut_short(file: Path) -> DamagedData:
    """The one sentence for a token file replaced or cut short while a run reads it."""
    return DamagedData(f"the dataset file {file} was replaced or cut short during the run: put the prepared file "
                       "back, then resume the run from its last checkpoint", file)


def file_entry(nbytes: int, digest: str) -> dict[str, Any]:
    """The manifest's record of one token file."""
    return {"size": int(nbytes), CHECKSUM: digest}
