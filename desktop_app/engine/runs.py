"""Run folders seen from outside the process that trains them: follow a run's metrics.jsonl live, tell whether a
run is live, and read where a pipeline folder stands. Read-only: nothing here ever writes to a run.

Runs launched by the CLI or by torchrun (rank 0 only) append one JSON event per line to RUN/metrics.jsonl and
flush after each line. A reader can therefore see a torn last line (the writer is mid-line) and, on resume, a
file cut back to the checkpoint's offset (a resume truncates it) before it grows again. run_folder.py parses it.

Stdlib only: the window imports this without torch.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from desktop_app.engine.events import Event, History, RunFolder
from desktop_app.engine.methods import method_of
from desktop_app.engine.pipeline_folder import DONE, STAGES_DIR, is_pipeline_dir, read_state
from desktop_app.engine.run_folder import (
    METRICS_FILE,
    RUN_FILE,
    MetricsReader,
    is_run_folder,
    last_record,
    read_json,
    read_metrics,
)


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


def watch_run(run_dir: str | Path, stop: threading.Event, *, poll_s: float = 0.5) -> Iterator[History]:
    """`follow_run_batches` as events for a view: each batch is a live History of the run (its records become the
    events they were written from, a cut-back file a Reset)."""
    for batch in follow_run_batches(run_dir, stop, poll_s=poll_s):
        yield History(str(run_dir), batch, live=True)


def replay_run(run_dir: str | Path) -> Iterator[Event]:
    """A finished (or stopped) run shown again: its folder, then its whole history."""
    run_dir = Path(run_dir)
    config = read_json(run_dir / RUN_FILE)
    yield RunFolder(str(run_dir), method_of(config).key if isinstance(config, dict) else "pretraining")
    yield History(str(run_dir), read_metrics(run_dir))


def follow_run(run_dir: str | Path, stop: threading.Event, *, poll_s: float = 0.5) -> Iterator[dict[str, Any]]:
    """Every record of RUN/metrics.jsonl, then each new one as it is appended (`tail -f` for runs).

    A torn last line is held back until it is complete. When the file is cut back (a resume truncates it to the
    checkpoint's offset) or replaced (a fresh run in the same folder), a {"type": "reset"} record comes first and
    the file is yielded again from its start. Ends when `stop` is set or after a record of type "finished".
    The folder and the file may not exist yet: it waits for them.
    """
    for batch in follow_run_batches(run_dir, stop, poll_s=poll_s):
        yield from batch


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

    p = Path(path)
    if is_pipeline_dir(p):
        return p
    if p.parent.name == STAGES_DIR and is_pipeline_dir(p.parent.parent):
        return p.parent.parent
    return None


def pipeline_resumable(path: str | Path) -> bool:
    """A pipeline folder with stages still to run (none started, one interrupted, or later ones waiting)."""

    if not is_pipeline_dir(path):
        return False
    stages = [s for s in read_state(path).get("stages", []) if isinstance(s, dict)]
    return not stages or any(s.get("status") not in DONE for s in stages)


# --- folders of several runs --------------------------------------------------------------------------------------

def nested_runs(folder: str | Path) -> list[Path]:
    """The runs inside a folder that holds several: a pipeline's stage folders (OUT/stages/NN-name, in stage order)
    or the phases of a recipe such as the self-play demo (DEMO/pretrain, DEMO/selfplay, in the order they started).
    [] for a run folder itself, or a folder with no run inside."""

    p = Path(folder)
    if is_pipeline_dir(p):
        stages = p / STAGES_DIR
        return sorted(c for c in stages.iterdir() if c.is_dir() and is_run_folder(c)) if stages.is_dir() else []
    if not p.is_dir() or is_run_folder(p):
        return []
    children = [c for c in p.iterdir() if c.is_dir() and not c.name.startswith(".") and is_run_folder(c)]

    def started(run: Path) -> float:
        for marker in (run / RUN_FILE, run / METRICS_FILE, run):
            try:
                return marker.stat().st_mtime
            except OSError:
                continue
        return 0.0

    return sorted(children, key=lambda c: (started(c), c.name))

