"""A run folder on disk, torch-free: its file names, checkpoint listing and verification, checksums, and the one
reader and writer of metrics.jsonl. The window, the CLI, the server and the engine all read runs through here.

    RUN/run.json                      the RunConfig (specs.RunConfig.save / load)
    RUN/metrics.jsonl                 one JSON event per line (events.py `to_dict`), appended and flushed by the
                                      process that trains (process 0 under torchrun)
    RUN/checkpoints/step-XXXXXXXX/    committed checkpoints, written by train/checkpoints.py; manifest.json last

A reader of metrics.jsonl can meet a torn last line (the writer is mid-line, or crashed there): it is skipped, and
an incremental reader waits for its newline. A resume cuts the file back to the byte offset its checkpoint
recorded, so what follows the checkpoint's step is written again, once.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError

RUN_FILE = "run.json"
METRICS_FILE = "metrics.jsonl"
CHECKPOINTS_DIR = "checkpoints"
MANIFEST = "manifest.json"
TRAINER_STATE = "trainer_state.json"
CHECKPOINT_FORMAT_VERSION = 1
REQUIRED_FILES = ("config.json", "model.safetensors", TRAINER_STATE, "optimizer.safetensors", "optimizer.json",
                  RUN_FILE)
# An adapter checkpoint (LoRA/QLoRA) holds the adapter (PEFT's files) instead of the full model.
ADAPTER_WEIGHTS = "adapter_model.safetensors"
ADAPTER_REQUIRED_FILES = ("adapter_config.json", ADAPTER_WEIGHTS, TRAINER_STATE, "optimizer.safetensors",
                          "optimizer.json", RUN_FILE)
RESET = "reset"  # type of the record an incremental reader returns when the file was cut back or replaced
_STEP_RE = re.compile(r"^step-(\d{8,})$")
_TAIL_BYTES = 64  # bytes before the read position compared at each poll to notice a cut-and-regrown file
_READ_CAP = 4 << 20  # bytes read per poll: a long history arrives in batches, not in one pause


class CheckpointError(UserError):
    """A checkpoint could not be written or read; the message names the path and what to do."""


# --- names ------------------------------------------------------------------------------------------------

def checkpoints_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / CHECKPOINTS_DIR


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(path: str | Path) -> int:
    m = _STEP_RE.match(Path(path).name)
    if not m:
        raise ValueError(f"{path} is not a checkpoint folder name")
    return int(m.group(1))


def is_run_folder(folder: Path) -> bool:
    """A training run's folder (not one of its checkpoints: a checkpoint also holds run.json, and an adapter
    checkpoint no config.json; its manifest tells it apart)."""
    has_run_json = (folder / RUN_FILE).is_file() and not (folder / "config.json").is_file() \
        and not (folder / MANIFEST).is_file()
    return (folder / CHECKPOINTS_DIR).is_dir() or has_run_json


def is_checkpoint_folder(folder: Path) -> bool:
    return (folder / MANIFEST).is_file() and (folder / TRAINER_STATE).is_file()


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while True:
            block = fh.read(chunk)
            if not block:
                break
            h.update(block)
    return h.hexdigest()


def read_json(path: Path) -> Any:
    """A JSON file's content, or None when it is missing or unreadable (callers check the shape they need)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


# --- checkpoints ------------------------------------------------------------------------------------------

def list_committed(run_dir: str | Path) -> list[Path]:
    """Committed checkpoint folders (those with a manifest), oldest to newest. Not verified."""
    parent = checkpoints_dir(run_dir)
    if not parent.is_dir():
        return []
    found = [p for p in parent.iterdir() if p.is_dir() and _STEP_RE.match(p.name) and (p / MANIFEST).is_file()]
    return sorted(found, key=step_of)


def verify_checkpoint(path: str | Path) -> dict[str, Any]:
    """Check every file against the manifest; return the manifest or raise CheckpointError naming the bad file."""
    path = Path(path)
    manifest_path = path / MANIFEST
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"checkpoint {path} is damaged: {manifest_path} is missing or unreadable "
                              f"({exc})") from None
    required = ADAPTER_REQUIRED_FILES if ADAPTER_WEIGHTS in files else REQUIRED_FILES
    for name in required:
        if name not in files:
            raise CheckpointError(f"checkpoint {path} is incomplete: {path / name} is not listed in its manifest")
    for name, info in files.items():
        f = path / name
        if not f.is_file():
            raise CheckpointError(f"checkpoint {path} is damaged: {f} is missing")
        if f.stat().st_size != info.get("bytes"):
            raise CheckpointError(f"checkpoint {path} is damaged: {f} has {f.stat().st_size} bytes, "
                                  f"the manifest says {info.get('bytes')}")
        if sha256_file(f) != info.get("sha256"):
            raise CheckpointError(f"checkpoint {path} is damaged: {f} does not match its checksum")
    return manifest


def find_resumable(run_dir: str | Path) -> tuple[Path | None, list[str]]:
    """The newest checkpoint that verifies, and a message for each newer one that did not."""
    problems: list[str] = []
    for path in reversed(list_committed(run_dir)):
        try:
            verify_checkpoint(path)
        except CheckpointError as exc:
            problems.append(str(exc))
            continue
        return path, problems
    return None, problems


def latest_checkpoint(run_dir: str | Path, verify: bool = True) -> Path | None:
    """The newest committed checkpoint (the newest that verifies when `verify`), or None."""
    if not verify:
        committed = list_committed(run_dir)
        return committed[-1] if committed else None
    return find_resumable(run_dir)[0]


def trainer_state(checkpoint: Path) -> dict[str, Any]:
    """A checkpoint's trainer_state.json ({} when unreadable)."""
    state = read_json(Path(checkpoint) / TRAINER_STATE)
    return state if isinstance(state, dict) else {}


def recorded_checksum(manifest: dict[str, Any] | None, path: Path) -> str | None:
    """The sha256 a checkpoint manifest recorded for `path`, when the file still has the recorded size."""
    recorded = manifest.get("files", {}).get(path.name, {}) if isinstance(manifest, dict) else {}
    if isinstance(recorded, dict) and isinstance(recorded.get("sha256"), str) \
            and recorded.get("bytes") == path.stat().st_size:
        return recorded["sha256"]
    return None


# --- metrics.jsonl ----------------------------------------------------------------------------------------

def parse_record(line: bytes | str) -> dict[str, Any] | None:
    """One metrics.jsonl line as a dict; None for a blank, torn or damaged line."""
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
    except ValueError:  # a damaged line (UnicodeDecodeError is a ValueError too)
        return None
    return record if isinstance(record, dict) else None


def read_metrics(run_dir: str | Path, *, upto_bytes: int | None = None) -> list[dict[str, Any]]:
    """Every record of a run's metrics.jsonl (a torn last line from a crash is skipped); `upto_bytes`: only those in
    its first bytes (what a checkpoint has seen: a resume keeps exactly these)."""
    try:
        with open(Path(run_dir) / METRICS_FILE, "rb") as fh:
            data = fh.read() if upto_bytes is None else fh.read(upto_bytes)
    except OSError:
        return []
    return [r for r in map(parse_record, data.split(b"\n")) if r is not None]


def tail_records(run_dir: str | Path, *, window: int = 256_000) -> list[dict[str, Any]]:
    """The complete records in the last `window` bytes of metrics.jsonl (cheap for a long run's latest state)."""
    path = Path(run_dir) / METRICS_FILE
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(0, size - window))
            lines = fh.read().split(b"\n")
    except OSError:
        return []
    if size > window:
        lines = lines[1:]  # the first line of the window is cut
    return [r for r in map(parse_record, lines) if r is not None]


def last_record(run_dir: str | Path, *, window: int = 65536) -> dict[str, Any] | None:
    """The last complete record of metrics.jsonl, or None."""
    records = tail_records(run_dir, window=window)
    return records[-1] if records else None


def checkpointed_history(run_dir: str | Path, step: int | None = None) -> list[dict[str, Any]]:
    """The records a resume keeps: those up to `step` (default: the newest committed checkpoint's step)."""
    if step is None:
        committed = list_committed(run_dir)
        if not committed:
            return []
        step = step_of(committed[-1])
    return [r for r in read_metrics(run_dir) if not isinstance(r.get("step"), (int, float)) or r["step"] <= step]


@dataclass
class MetricsSummary:
    """Where a run stands by its records: its last step and evaluation, best validation loss and end."""

    last_step: dict[str, Any] = field(default_factory=dict)
    last_eval: dict[str, Any] = field(default_factory=dict)
    best_val_loss: float | None = None
    finished: dict[str, Any] | None = None  # the last "finished" record (None: still running, or it crashed)

    @classmethod
    def of(cls, records: list[dict[str, Any]]) -> MetricsSummary:
        out = cls()
        for record in records:
            kind = record.get("type")
            if kind == "step":
                out.last_step = record
            elif kind == "eval":
                out.last_eval = record
                val = record.get("val_loss")
                if isinstance(val, (int, float)) and not isinstance(val, bool) and val == val:
                    out.best_val_loss = val if out.best_val_loss is None else min(out.best_val_loss, val)
            elif kind == "finished":
                out.finished = record
        return out


class MetricsReader:
    """Incremental reader of one metrics.jsonl: `poll()` returns the complete records added since the last poll.

    A torn last line waits until its newline arrives. A file that shrank, was replaced (another inode) or whose
    bytes before the read position changed (cut back, then regrown past it between two polls) is read again from
    its start, after a {"type": "reset"} record.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.pos = 0  # bytes consumed, the torn last line included
        self.pending = b""
        self.tail = b""  # the last bytes consumed, to check they are still there
        self.ident: tuple[int, int] | None = None
        self.more = False  # the last poll stopped at _READ_CAP: more is there to read now

    def restart(self) -> None:
        self.pos, self.pending, self.tail, self.ident = 0, b"", b"", None

    def poll(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        self.more = False
        try:
            st = os.stat(self.path)
        except OSError:  # not there (yet, or removed while a fresh run restarts): what we showed is gone
            if self.pos:
                self.restart()
                out.append({"type": RESET})
            return out
        ident = (st.st_dev, st.st_ino)
        try:
            with open(self.path, "rb") as fh:
                if self.pos and (ident != self.ident or st.st_size < self.pos or not self._tail_holds(fh)):
                    self.restart()
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
        out += [r for r in map(parse_record, lines) if r is not None]
        return out

    def _tail_holds(self, fh: Any) -> bool:
        fh.seek(self.pos - len(self.tail))
        return fh.read(len(self.tail)) == self.tail


class MetricsWriter:
    """Appends records to RUN/metrics.jsonl, one flushed line each, so the history survives a crash.

    `keep_bytes`: a resume keeps the file up to the offset its checkpoint recorded (the rest is cut, and written
    again by the resumed steps); None starts the file afresh. A write the disk refuses (full, quota) loses nothing:
    the file is cut back to its last whole line, the records wait in memory (in order) and are written with the next
    record once space returns; the next checkpoint writes them first (`flush_pending`), so a run whose disk stays
    full pauses there, as for the checkpoint itself. The first refusal is said once.
    """

    MAX_PENDING = 100_000  # records kept in memory while the disk refuses them (a few MB)

    def __init__(self, run_dir: str | Path, keep_bytes: int | None = None):
        self.path = Path(run_dir) / METRICS_FILE
        if keep_bytes is None:
            self.path.unlink(missing_ok=True)
        elif self.path.exists() and self.path.stat().st_size > keep_bytes:
            with open(self.path, "r+b") as fh:
                fh.truncate(keep_bytes)
        self.fh: Any = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run's whole life
        self.committed = self.path.stat().st_size  # bytes of whole lines on disk
        self.pending: list[str] = []
        self.ok = True

    def write(self, record: dict[str, Any]) -> str | None:
        """Append one record; returns a warning the first time the disk refuses one, else None."""
        if self.fh is None:
            return None
        if len(self.pending) < self.MAX_PENDING:
            self.pending.append(json.dumps(record, allow_nan=True) + "\n")
        try:
            self.flush_pending()
        except OSError as exc:
            if not self.ok:
                return None
            self.ok = False
            return (f"could not write {self.path} ({exc.strerror or exc}): the newest records wait in memory and "
                    "are written when space returns (the next checkpoint waits for it)")
        self.ok = True
        return None

    def take_warnings(self) -> list[str]:
        """Warnings of what writes behind metrics.jsonl (trackers) since the last call, for the loop to say live."""
        return []

    def flush_pending(self) -> None:
        """Write the records waiting in memory; on a refusal the file is cut back to its last whole line, the
        records stay waiting and the OSError is raised."""
        if self.fh is None or not self.pending:
            return
        try:
            self.fh.write("".join(self.pending))
            self.fh.flush()
        except OSError:
            self._cut_back()
            raise
        self.committed = os.fstat(self.fh.fileno()).st_size
        self.pending.clear()

    def _cut_back(self) -> None:
        """Drop a half-written tail (and what the buffer still holds) so the file ends on a whole line."""
        with contextlib.suppress(OSError, ValueError):
            self.fh.close()
        with contextlib.suppress(OSError):
            os.truncate(self.path, self.committed)
        self.fh = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - open for the run's whole life

    def offset(self) -> int:
        """Bytes of whole lines written so far (a checkpoint records it, to cut the file back there on resume)."""
        if self.fh is not None:
            with contextlib.suppress(OSError):
                self.flush_pending()
        return self.committed if self.fh is not None else (self.path.stat().st_size if self.path.exists() else 0)

    def truncate(self, offset: int) -> None:
        """Cut the file back to `offset` (a rollback to a checkpoint) and go on writing there."""
        if self.fh is None:
            return
        self.fh.flush()
        self.fh.truncate(offset)
        self.fh.seek(offset)
        self.committed, self.pending = offset, []

    def close(self) -> None:
        if self.fh is not None:
            with contextlib.suppress(OSError):
                self.fh.close()
            self.fh = None
