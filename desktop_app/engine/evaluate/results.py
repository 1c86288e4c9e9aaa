"""The evaluations file of a model (torch-free): every evaluation of it, kept in its own folder and shown again later.

`evaluations.json` = {"format_version": 1, "results": [record, ...]}, oldest first, at most KEEP records. A record:
{"model": the path as given, "name", "kind" (run | checkpoint | export | hf), "checkpoint": the folder whose
weights were measured, "step": its training step or null, "measured_at": ISO time, "seconds", "spec": the
EvalSpec, "metrics": {...}}. A run's (and a run's checkpoint's) file lives in the run folder, an export's in the
export; a Hugging Face folder of someone else's is not written to. Written atomically; a damaged file reads as
empty and is replaced by the next write.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.os_faults import fault_error, fixable

RESULTS_FILE = "evaluations.json"
FORMAT_VERSION = 1
KEEP = 200


def results_folder(folder: Path, kind: str) -> Path | None:
    """Where the evaluations of a model live: its run folder (runs and their checkpoints), the folder itself
    (exports and lone checkpoints), or None (a Hugging Face folder or a GGUF file that is not ours: nothing is
    written beside someone else's model)."""
    if kind in ("hf", "gguf") or not folder.is_dir():
        return None
    if kind in ("run", "checkpoint") and folder.parent.name == run_folder.CHECKPOINTS_DIR \
            and run_folder.is_run_folder(folder.parent.parent):
        return folder.parent.parent
    return folder


def read_results(folder: str | Path) -> list[dict[str, Any]]:
    """The records of a folder's evaluations file, oldest first ([] when there is none or it is damaged)."""
    path = Path(folder) / RESULTS_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    records = data.get("results") if isinstance(data, dict) else None
    return [r for r in records if isinstance(r, dict) and isinstance(r.get("metrics"), dict)] \
        if isinstance(records, list) else []


def append_result(folder: str | Path, record: dict[str, Any]) -> Path:
    """Add one record (the newest KEEP stay); returns the file. A full disk or a read-only folder is a DiskFault
    (one line); the file as it was stays (atomic write)."""
    path = Path(folder) / RESULTS_FILE
    records = [*read_results(folder), {"measured_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **record}][-KEEP:]
    try:
        atomic_write_text(path, json.dumps({"format_version": FORMAT_VERSION, "results": records}, indent=1,
                                           allow_nan=True))
    except OSError as exc:
        if not fixable(exc):
            raise
        raise fault_error(exc, doing="saving the evaluation results", path=path) from exc
    return path


def results_folder_of(path: str | Path) -> Path | None:
    """Where a model path's evaluations live, judged from its folder alone (no weights read; the window's view)."""
    p = Path(path)
    if run_folder.is_run_folder(p):
        return p
    if p.parent.name == run_folder.CHECKPOINTS_DIR and run_folder.is_run_folder(p.parent.parent):
        return p.parent.parent
    return p if (p / RESULTS_FILE).is_file() or (p / "model_spec.json").is_file() else None


def latest_result(path: str | Path) -> dict[str, Any] | None:
    """The newest record measured for this model path (a run: for any of its checkpoints), or None."""
    folder = results_folder_of(path)
    if folder is None:
        return None
    records = read_results(folder)
    own = [r for r in records if str(r.get("model")) == str(path) or str(r.get("checkpoint", "")).startswith(str(path))]
    return own[-1] if own else None
