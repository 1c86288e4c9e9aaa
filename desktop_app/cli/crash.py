"""An exception no CLI verb expected: its traceback goes to the workspace's log folder, the user gets one line.

The window does the same with its error dialogs (ui/context.py writes `logs/error-YYYYMMDD.log`); the CLI
appends to the same file, so "Open log folder" shows both. An OS fault the person can fix (a full disk, a read-only
or forbidden folder, a file that vanished: engine/os_faults.py) is no bug: `fault_line` says it in one line, exit 2.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from desktop_app import __version__
from desktop_app.engine.os_faults import fault_error, fixable
from desktop_app.engine.workspace import default_workspace_root

EXIT_CRASH = 1  # a failure, not a usage mistake (UserError and argparse exit 2)
EXIT_FAULT = 2  # an OS fault the person can fix: like a UserError

# verb -> the work it does, for "<work> failed: the disk is full (...)"
VERB_WORK = {
    "prepare": "preparing the dataset", "model": "reading the model", "train": "training",
    "generate": "generating", "export": "exporting the model", "sandbox": "running the programs",
    "tasks": "writing the tasks", "serve": "serving the model", "selfplay-demo": "the self-play demonstration",
    "eval": "evaluating", "models": "getting the model", "runs": "reading the runs",
    "benchmarks": "getting the benchmark data",
}


def log_folder(workspace: str | os.PathLike[str] | None = None) -> Path:
    """The workspace's logs folder (the --workspace given, else $AZR_WORKSPACE or the user data folder)."""

    root = Path(workspace).expanduser() if workspace else default_workspace_root()
    return root / "logs"


def write_crash_log(exc: BaseException, argv: list[str], workspace: str | os.PathLike[str] | None = None) -> Path:
    """Append the traceback (with the command and versions) to the day's error log; returns its path.

    Falls back to the temporary folder when the workspace cannot be written (a read-only or missing drive).
    """

    header = (f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} cli: azr-trainer {' '.join(argv)}\n"
              f"AZR Model Trainer {__version__}, Python {sys.version.split()[0]}, {sys.platform}"
              f"{', frozen' if getattr(sys, 'frozen', False) else ''}\n")
    text = header + "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) + "\n"
    name = f"error-{time.strftime('%Y%m%d')}.log"
    for folder in _candidates(workspace):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / name
            with path.open("a", encoding="utf-8") as fh:
                fh.write(text)
            return path
        except OSError:
            continue
    raise OSError("no folder to write the error log to")


def _candidates(workspace: str | os.PathLike[str] | None) -> list[Path]:
    folders = []
    with contextlib.suppress(Exception):  # no platformdirs, no home folder: the temporary folder still works
        folders.append(log_folder(workspace))
    return [*folders, Path(tempfile.gettempdir()) / "azr-model-trainer-logs"]


def crash_line(exc: BaseException, argv: list[str], workspace: str | os.PathLike[str] | None = None) -> str:
    """The one line the user sees; the traceback is in the file it names."""
    summary = (str(exc).strip().splitlines() or [""])[0][:300]
    what = f"{type(exc).__name__}: {summary}" if summary else type(exc).__name__
    try:
        where = f"the details are in {write_crash_log(exc, argv, workspace)}"
    except OSError as log_error:
        where = f"and the error log could not be written ({log_error})"
    return f"error: unexpected {what} (a bug in AZR Model Trainer; {where})"


def fault_line(exc: BaseException, verb: str) -> str | None:
    """The one line for an OS fault the person can fix ("error: exporting the model failed: the disk is full
    (/data/out; 12 MB free): free some space or choose a folder on another disk"), or None when `exc` is not one."""

    if not fixable(exc):
        return None
    doing = VERB_WORK.get(verb) or (f"the {verb} command" if verb else "the command")
    return f"error: {fault_error(exc, doing=doing)}"


def silence_stdout() -> None:
    """After a broken pipe: point stdout at the null device, so the exit's flush does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
