"""Run folders seen from outside the process that trains them: follow a run's metrics.jsonl live, tell whether a
run is live, and read where a pipeline folder stands. Read-only: nothing here ever writes to a run.

Runs launched by the CLI or by torchrun (rank 0 only) append one JSON event per line to RUN/metrics.jsonl and
flush after each line. A reader can therefore see a torn last line (the writer is mid-line) and, on resume, a
file cut back to the checkpoint's offset (train/loop.py truncates it) before it grows again.

Stdlib only: the window imports this without torch.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"  # train/loop.py's METRICS_FILE (not imported from there: loop imports torch)
RESET = "reset"  # type of the marker record: the file was cut back or replaced; what follows starts again
_TAIL_BYTES = 64  # bytes before the read position compared at each poll to notice a cut-and-regrown file
_READ_CAP = 4 << 20  # bytes read per poll: a long history arrives in batches, not in one pause


def _parse(line: bytes) -> dict[str, Any] | None:
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
    except ValueError:  # a damaged line (UnicodeDecodeError is a ValueError too): skipped, as read_metrics does
        return None
    return record if isinstance(record, dict) else None


class MetricsReader:
    """Incremental reader of one metrics.jsonl: `poll()` returns the complete records added since the last poll.

    A torn last line waits in `pending` until its newline arrives. A file that shrank, was replaced (another
    inode) or whose bytes before the read position changed (cut back, then regrown past it between two polls)
    is read again from its start, after a {"type": "reset"} record.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.pos = 0  # bytes consumed, the torn last line included
        self.pending = b""
        self.tail = b""  # the last bytes consumed, to check they are still there
        self.ident: tuple[int, int] | None = None
        self.more = False  # the last poll stopped at _READ_CAP: more is there to read now

    def _restart(self) -> None:
        self.pos, self.pending, self.tail, self.ident = 0, b"", b"", None

    def poll(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        self.more = False
        try:
            st = os.stat(self.path)
        except OSError:  # not there (yet, or removed while a fresh run restarts): what we showed is gone
            if self.pos:
                self._restart()
                out.append({"type": RESET})
            return out
        ident = (st.st_dev, st.st_ino)
        try:
            with open(self.path, "rb") as fh:
                if self.pos and (ident != self.ident or st.st_size < self.pos or not self._tail_holds(fh)):
                    self._restart()
                    out.append({"type": RESET})
                self.ident = ident
                fh.seek(self.pos)
                data = fh.read(_READ_CAP)
        except OSError:
            return out
        if not data:
            return out
        self.more = len(data) == _READ_CAP
        self.pos += len(data)
        self.tail = (self.tail + data)[-_TAIL_BYTES:]
        *lines, self.pending = (self.pending + data).split(b"\n")
        for line in lines:
            record = _parse(line)
            if record is not None:
                out.append(record)
        return out

    def _tail_holds(self, fh: Any) -> bool:
        fh.seek(self.pos - len(self.tail))
        return fh.read(len(self.tail)) == self.tail


def follow_run_batches(run_dir: str | Path, stop: threading.Event, *, poll_s: float = 0.5
                       ) -> Iterator[list[dict[str, Any]]]:
    """`follow_run`, a poll's records at a time (a UI draws a batch at once instead of one signal a record)."""
    reader = MetricsReader(Path(run_dir) / METRICS_FILE)
    while not stop.is_set():
        batch = reader.poll()
        end = next((i for i, r in enumerate(batch) if r.get("type") == "finished"), None)
        if end is not None:
            yield batch[: end + 1]
            return
        if batch:
            yield batch
        if not reader.more:
            stop.wait(poll_s)


def follow_run(run_dir: str | Path, stop: threading.Event, *, poll_s: float = 0.5) -> Iterator[dict[str, Any]]:
    """Every record of RUN/metrics.jsonl, then each new one as it is appended (`tail -f` for runs).

    A torn last line is held back until it is complete. When the file is cut back (a resume truncates it to the
    checkpoint's offset) or replaced (a fresh run in the same folder), a {"type": "reset"} record comes first and
    the file is yielded again from its start. Ends when `stop` is set or after a record of type "finished".
    The folder and the file may not exist yet: it waits for them.
    """
    for batch in follow_run_batches(run_dir, stop, poll_s=poll_s):
        yield from batch


def last_record(run_dir: str | Path, *, window: int = 65536) -> dict[str, Any] | None:
    """The last complete record of RUN/metrics.jsonl (a torn last line is passed over), or None."""
    path = Path(run_dir) / METRICS_FILE
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - window))
            lines = fh.read().split(b"\n")
    except OSError:
        return None
    if size > window:
        lines = lines[1:]  # the first line of the window is cut
    for line in reversed(lines[:-1]):  # the last item follows the last newline: empty, or a torn line
        record = _parse(line)
        if record is not None:
            return record
    return None


def is_live(run_dir: str | Path, *, within_s: float = 120.0, now: float | None = None) -> bool:
    """A run that looks like it is training now, in some process: its metrics.jsonl changed in the last
    `within_s` seconds and its last record is not "finished". (A run killed in the last `within_s` seconds
    looks live too: nothing on disk tells them apart.)"""
    try:
        mtime = (Path(run_dir) / METRICS_FILE).stat().st_mtime
    except OSError:
        return False
    if (time.time() if now is None else now) - mtime > within_s:
        return False
    last = last_record(run_dir)
    return last is None or last.get("type") != "finished"


# --- pipelines --------------------------------------------------------------------------------------------------

def pipeline_root(path: str | Path) -> Path | None:
    """The pipeline folder `path` is, or whose stage folder (OUT/stages/NN-name) it is; None otherwise."""
    from desktop_app.engine.finetune.pipeline import STAGES_DIR, is_pipeline_dir

    p = Path(path)
    if is_pipeline_dir(p):
        return p
    if p.parent.name == STAGES_DIR and is_pipeline_dir(p.parent.parent):
        return p.parent.parent
    return None


def pipeline_resumable(path: str | Path) -> bool:
    """A pipeline folder with stages still to run (none started, one interrupted, or later ones waiting)."""
    from desktop_app.engine.finetune.pipeline import DONE, is_pipeline_dir, read_state

    if not is_pipeline_dir(path):
        return False
    stages = [s for s in read_state(path).get("stages", []) if isinstance(s, dict)]
    return not stages or any(s.get("status") not in DONE for s in stages)
