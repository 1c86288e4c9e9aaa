"""The data files a fine-tuning run reads (JSONL, CSV, Parquet, ...), fingerprinted so that a resume trains on the
data it started on.

A fine-tune reads its files whole when it starts, and a resume rebuilds the same examples in the same order from
them; a file edited between the two would silently shift every example after the edit. So each file's size and
blake2b are recorded in RUN/data_files.json when the run starts, and a resume compares them: a changed file is
refused naming it (as a changed base model is), unless the person accepts changes (`train --resume RUN
--accept-config-change`, as for a changed config; the window asks first, `touched_files`), which continues with a
warning and records the new files.
Prepared datasets (token stores) carry their own checksums: data/store_check.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.data.store_check import CHECKSUM, hash_prefix, stat_key
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Log
from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.os_faults import size_text
from desktop_app.engine.specs import RunConfig

DATA_FILES = "data_files.json"


def read_files(config: RunConfig) -> list[Path]:
    """The regular files the run reads examples from: its data and held-out validation files (folders, such as a
    prepared dataset, are not among them)."""
    val = config.method_options.get("val_data") if isinstance(config.method_options, dict) else None
    named = [*config.data, *(val if isinstance(val, list) else [])]
    files = [Path(str(p)).expanduser() for p in named]
    return list(dict.fromkeys(f for f in files if f.is_file()))


def fingerprint(file: Path, known: dict[str, Any] | None = None) -> dict[str, Any]:
    """Size and blake2b of `file`, with its stat (size, mtime, ctime, inode): a file whose stat is the `known`
    fingerprint's is not hashed again (any write changes its ctime), so a resume over a large file starts at once."""
    stat = stat_key(file)
    if known and known.get("stat") == stat and isinstance(known.get(CHECKSUM), str):
        return dict(known)
    return {"size": stat[0], CHECKSUM: hash_prefix(file, stat[0]).hexdigest(), "stat": stat}


def _recorded(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / DATA_FILES).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    return files if isinstance(files, dict) else {}


def _change(file: str, was: dict[str, Any], now: dict[str, Any]) -> str:
    if was.get("size") != now["size"]:
        return f"{file} is {size_text(now['size'])} now, {size_text(int(was.get('size') or 0))} when the run started"
    return f"{file} has other contents than when the run started (same size, another checksum)"


def touched_files(run_dir: Path, config: RunConfig) -> list[str]:
    """The run's data files written to since its start recorded them (their size or times differ): read from their
    stat only, so a front end can ask before a resume whether to continue on new data; the checksum decides then."""
    recorded = _recorded(run_dir)
    touched = []
    for file in read_files(config):
        known = recorded.get(str(file))
        if isinstance(known, dict) and "stat" in known and stat_key(file) != known["stat"]:
            touched.append(str(file))
    return touched


@dataclass
class DataFiles:
    """The fingerprints of a run's data files now, and what a resume says about them."""

    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[Event] = field(default_factory=list)

    @classmethod
    def check(cls, run_dir: Path, config: RunConfig, *, resumed: bool, accept_change: bool) -> DataFiles:
        """Fingerprint the run's data files; a resume compares them with those recorded at its start: UserError
        naming the changed files, or (`accept_change`) a warning. Nothing is written here."""
        recorded = _recorded(run_dir) if resumed else {}
        files = {str(f): fingerprint(f, recorded.get(str(f))) for f in read_files(config)}
        changed = [_change(name, recorded[name], now) for name, now in files.items()
                   if isinstance(recorded.get(name), dict) and recorded[name].get(CHECKSUM) != now[CHECKSUM]]
        if changed and not accept_change:
            raise UserError("cannot resume: a data file changed since this run started (" + "; ".join(changed)
                            + "). Restore it, or resume with --accept-config-change to continue on the new data "
                            "(its examples then differ from those the run has trained on so far)")
        notes: list[Event] = [Log("warning", "continuing on changed data: " + "; ".join(changed))] if changed else []
        return cls(files, notes)

    def record(self, run_dir: Path) -> None:
        """RUN/data_files.json (process 0, once the run folder is open); nothing when the run reads no data file."""
        if not self.files:
            return
        try:
            atomic_write_text(run_dir / DATA_FILES, json.dumps({"files": self.files}, indent=1) + "\n")
        except OSError as exc:
            raise UserError(f"cannot write the run folder {run_dir}: {exc.strerror or exc}; choose a folder you can "
                            "write to (with free space)") from None
