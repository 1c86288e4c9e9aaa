"""Where datasets, tokenizers, models and runs live on disk.

The default root is the platform's user data folder; the `AZR_WORKSPACE` environment variable (tests,
portable installs) or an explicit path overrides it. Nothing the app makes lives only in memory.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from desktop_app.engine import run_folder
from desktop_app.engine.model.gguf_file import is_gguf_file
from desktop_app.engine.os_faults import DiskFault, check_writable

KINDS = ("datasets", "tokenizers", "models", "runs", "exports", "sweeps")  # sweeps: engine/sweep_folder.py
APP_NAME = "AZR Model Trainer"


def default_workspace_root() -> Path:
    env = os.environ.get("AZR_WORKSPACE")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir(APP_NAME, appauthor=False)) / "workspace"


def startup_root(explicit: str | Path = "", last: str | Path = "") -> Path:
    """The workspace the window opens: the one asked for (--workspace), else $AZR_WORKSPACE, else the last one used
    when it still exists, else the platform's user data folder."""
    if str(explicit).strip():
        return Path(explicit).expanduser()
    if os.environ.get("AZR_WORKSPACE") or not str(last).strip() or not Path(last).expanduser().is_dir():
        return default_workspace_root()
    return Path(last).expanduser()


def workspace_problem(root: str | Path) -> str | None:
    """Why `root` cannot be the workspace (one sentence: read-only media, no permission, not a folder), or None when
    the app can create its folders and files there. Makes the folder when it is missing."""

    try:
        check_writable(root, "the workspace")
    except DiskFault as exc:
        return str(exc)
    except OSError as exc:  # a file where the folder should be, and other faults os_faults does not name
        return f"{root} cannot be the workspace: {exc.strerror or exc}: choose another folder"
    return None


def slugify(name: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name.strip()).strip("-.")
    return slug[:64] or "item"


@dataclass
class Workspace:
    root: Path

    @classmethod
    def open(cls, root: str | Path | None = None) -> Workspace:
        ws = cls(Path(root).expanduser() if root else default_workspace_root())
        ws.ensure()
        return ws

    def ensure(self) -> None:
        for kind in KINDS:
            (self.root / kind).mkdir(parents=True, exist_ok=True)
        (self.root / "logs").mkdir(parents=True, exist_ok=True)

    def folder(self, kind: str) -> Path:
        if kind not in KINDS:
            raise ValueError(f"unknown workspace kind {kind!r}")
        return self.root / kind

    def items(self, kind: str) -> list[Path]:
        """Entries of one kind, newest first (hidden and temporary folders excluded)."""
        folder = self.folder(kind)
        entries = [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.exists() else []
        return sorted(entries, key=lambda p: p.stat().st_mtime, reverse=True)

    def new_path(self, kind: str, name: str) -> Path:
        """A fresh, not yet existing path `<kind>/<name>` (suffixed -2, -3... if taken)."""
        base = self.folder(kind) / slugify(name)
        candidate, n = base, 2
        while candidate.exists():
            candidate = base.with_name(f"{base.name}-{n}")
            n += 1
        return candidate

    def new_run_dir(self, name: str = "") -> Path:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return self.new_path("runs", f"{stamp}-{name}" if name else stamp)

    @property
    def log_dir(self) -> Path:
        return self.root / "logs"


def remembered_gguf_files(paths: Iterable[str | Path], exclude: Iterable[str | Path] = ()) -> list[Path]:
    """The GGUF files among `paths` (models the window remembers opening) that still exist, each once and in the
    order given, less those in `exclude` (listed elsewhere already, such as the workspace's own .gguf files).
    A folder, a missing file or a file that is not GGUF (its first bytes are not the GGUF magic) is left out."""

    def key(p: str | Path) -> str:
        return os.path.normcase(os.path.abspath(os.path.expanduser(str(p))))

    seen = {key(p) for p in exclude}
    out: list[Path] = []
    for p in paths:
        if not str(p).strip() or key(p) in seen:
            continue
        seen.add(key(p))
        if is_gguf_file(Path(p).expanduser()):
            out.append(Path(p).expanduser())
    return out


# --- the workspace's models ---------------------------------------------------------------------------------

@dataclass
class ModelCandidate:
    """A folder (or GGUF file) in the workspace that `load_model` accepts (for the Generate tab's model picker)."""

    path: Path
    kind: str  # run | export | hf | gguf
    name: str


def list_generatable(workspace: Workspace | str | Path) -> list[ModelCandidate]:
    """Folders of a workspace that `load_model` can open: runs with a committed checkpoint, exports and
    models/ folders with a config.json or .gguf files. Newest first within each kind (runs, then exports, then models).

    `workspace` is a Workspace or its root path. Cheap: no checksum is verified and no weights read.
    """

    ws = workspace if isinstance(workspace, Workspace) else Workspace(Path(workspace))
    found: list[ModelCandidate] = []
    for run in ws.items("runs") if ws.folder("runs").is_dir() else []:
        if run.is_dir():
            latest = run_folder.latest_checkpoint(run, verify=False)
            if latest is not None:
                found.append(ModelCandidate(run, "run", f"{run.name} (step {run_folder.step_of(latest)})"))
    for kind_folder, kind in (("exports", "export"), ("models", "hf")):
        if not ws.folder(kind_folder).is_dir():
            continue
        for item in ws.items(kind_folder):
            if item.is_file() and item.suffix.lower() == ".gguf":
                found.append(ModelCandidate(item, "gguf", item.name))
            elif item.is_dir() and (item / "config.json").is_file():
                found.append(ModelCandidate(item, "export" if (item / "model_spec.json").is_file() else kind,
                                            item.name))
    return found
