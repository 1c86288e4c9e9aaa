"""The loop's checkpoint saving: save (every process takes part; process 0 writes), and what a save the operating
system refuses does.

A fault the person can fix (a full disk, a quota, a read-only or forbidden folder: os_faults.fixable) pauses the run
instead of ending it, when someone can answer (Controls.answers_faults: the window, the CLI, the server): the
partial checkpoint is already gone and the last committed one intact; SaveBlocked says why, and the run waits for
Controls.retry (save again), Controls.save_elsewhere(folder) (move the run there, then save) or stop (end without
this checkpoint). Nothing of the training state changes while it waits, so a run that saves after a retry goes on
exactly as one that never met the fault. Several processes (torchrun) cannot wait for one person together here:
they end cleanly with the one line, as does a run nobody can answer.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Generator, Iterator
from pathlib import Path

from desktop_app.engine import os_faults, run_folder
from desktop_app.engine.events import CheckpointSaved, Event, Finished, History, Log, RunFolder, SaveBlocked
from desktop_app.engine.methods import method_of
from desktop_app.engine.train import checkpoints as ckpt
from desktop_app.engine.train.run import Run
from desktop_app.engine.train.tracking import TrackedMetrics


class SaveFailed(Exception):
    """A checkpoint could not be saved; the run ends cleanly (`end_after_failed_save`)."""


class SaveStopped(SaveFailed):
    """The person stopped a run whose save was blocked: it ends without that checkpoint."""


def save(run: Run) -> Iterator[Event]:
    """Save a checkpoint (every process takes part; process 0 writes). A fixable fault waits for the person
    (`_blocked`); a save that cannot be made raises SaveFailed (SaveStopped when the person stopped)."""
    while True:
        problem, fault, path = "", None, None
        try:
            _write_waiting_metrics(run)
            path = run.write_checkpoint()
        except ckpt.SaveFault as exc:
            problem, fault = str(exc), exc
        except run_folder.CheckpointError as exc:
            problem = str(exc)
        if run.dist is not None and not run.dist.agree(not problem, "saving a checkpoint"):
            problem = problem or "process 0 could not save the checkpoint (its message says why)"
        if not problem:
            break
        if fault is None or run.dist is not None or not run.controls.answers_faults or run.controls.stop.is_set():
            raise SaveFailed(problem)
        yield from _blocked(run, fault)
    if path is not None:
        best = run.best_step() == run.state.step
        yield run.emit(CheckpointSaved(step=run.state.step, path=str(path), best=best))


def _write_waiting_metrics(run: Run) -> None:
    """metrics.jsonl's records the disk refused (they wait in memory) go first: a checkpoint records the offset its
    resume cuts the file back to, so they must be on disk before it. A disk that still refuses blocks the save."""
    if run.metrics is None or not run.is_main:
        return
    try:
        run.metrics.flush_pending()
    except OSError as exc:
        if not os_faults.fixable(exc):
            raise
        fault = os_faults.fault_error(exc, doing="writing the run's metrics", path=run.metrics.path)
        free = os_faults.free_bytes(run.run_dir)
        raise ckpt.SaveFault(f"could not save the step {run.state.step} checkpoint: {fault}", fault, run.run_dir,
                             0, free if free is not None else -1) from exc


def _blocked(run: Run, fault: ckpt.SaveFault) -> Iterator[Event]:
    """Say why the save is blocked and wait for the person's answer; a move elsewhere is made here (a move that
    fails is blocked again, with its own line). Returns when the save should be tried again."""
    blocked: ckpt.SaveFault | os_faults.DiskFault = fault
    while True:
        folder = blocked.folder if isinstance(blocked, ckpt.SaveFault) else (blocked.path or run.run_dir)
        needed = blocked.needed if isinstance(blocked, ckpt.SaveFault) else 0
        free = os_faults.free_bytes(folder)
        message = str(blocked.fault if isinstance(blocked, ckpt.SaveFault) else blocked)
        yield SaveBlocked(step=run.state.step, message=message, folder=str(folder), needed=needed,
                          free=free if free is not None else -1)
        t = time.perf_counter()
        run.controls.wait_for_answer()
        run.paused_s += time.perf_counter() - t  # the wait is not training time
        if run.controls.stop.is_set():
            raise SaveStopped(_stopped_message(run))
        _, elsewhere = run.controls.take_decision()
        if not elsewhere:
            return
        try:
            yield from move_run(run, Path(elsewhere).expanduser())
            return
        except os_faults.DiskFault as exc:
            blocked = exc


def _stopped_message(run: Run) -> str:
    kept = f"the last checkpoint ({run.last_checkpoint}) is intact" if run.last_checkpoint is not None else \
        "no checkpoint was saved"
    return (f"stopped at step {run.state.step} without saving it: {kept}; `train --resume` continues from there "
            "once the disk has space")


def move_target(run_dir: Path, folder: Path) -> Path:
    """Where 'save elsewhere' into `folder` puts the run: `folder` itself when it is empty (or new), else a
    subfolder named as the run."""
    if not folder.exists() or (folder.is_dir() and not any(folder.iterdir())):
        return folder
    return folder / run_dir.name


def move_run(run: Run, folder: Path) -> Generator[Event, None, None]:
    """Move the run into `folder` (move_target): its top-level files (run.json, metrics.jsonl, tracking, the
    method's logs) are copied and metrics.jsonl goes on there; the checkpoints saved from now on go there too. The
    old folder keeps its checkpoints. Raises DiskFault (the one line) when the new place cannot take it."""
    old, target = run.run_dir, move_target(run.run_dir, folder)
    if target.resolve() == old.resolve():
        return
    if run_folder.list_committed(target) or (target / run_folder.RUN_FILE).exists():
        raise os_faults.DiskFault(f"{target} already holds a run: choose an empty folder", errno_=0, path=target)
    os_faults.check_writable(target, "the new run folder")
    offset = run.metrics.offset() if run.metrics is not None else 0
    try:
        _copy_run_files(old, target, offset)
    except OSError as exc:
        shutil.rmtree(target, ignore_errors=True)
        if not os_faults.fixable(exc):
            raise
        raise os_faults.fault_error(exc, doing=f"moving the run to {target}", path=target) from exc
    if run.metrics is not None:
        run.metrics.close()
        run.metrics = TrackedMetrics(target, run.config, keep_bytes=offset, resume_step=run.state.step)
    run.run_dir = target
    if run.parts is not None:
        run.parts.ctx.run_dir = target
    run.remember_checkpoint_vals()
    kept = run_folder.list_committed(old)
    yield RunFolder(str(target), method_of(run.config).key, resumed=True)
    yield History(str(target), run_folder.read_metrics(target))
    yield run.emit(Log("warning", f"the run moved to {target} at step {run.state.step} and goes on there; {old} "
                       + (f"keeps its checkpoints up to step {run_folder.step_of(kept[-1])}" if kept else
                          "has no checkpoint of it")))


def _copy_run_files(old: Path, target: Path, metrics_bytes: int) -> None:
    """The run folder's own files (not its checkpoints); metrics.jsonl up to what was written so far."""
    target.mkdir(parents=True, exist_ok=True)
    for item in old.iterdir():
        if not item.is_file() or item.name.startswith("."):
            continue
        if item.name == run_folder.METRICS_FILE:
            with open(item, "rb") as src, open(target / item.name, "wb") as dst:
                dst.write(src.read(metrics_bytes))
        else:
            shutil.copy2(item, target / item.name)


def end_after_failed_save(run: Run, exc: SaveFailed) -> Iterator[Event]:
    """The run ends after a save it could not make: the error line and a failed Finished, or, when the person
    stopped a blocked save, a stopped Finished that says what is kept."""
    if isinstance(exc, SaveStopped):
        yield run.emit(Log("warning", str(exc)))
        yield run.emit(Finished("stopped", step=run.state.step, message=str(exc), result=run.result()))
    else:
        message = f"{exc}. Training stopped; free some space or choose another folder, then resume."
        yield run.emit(Log("error", message))
        yield run.emit(Finished("failed", step=run.state.step, message=message, result=run.result()))
    run.finished_cleanly = True
