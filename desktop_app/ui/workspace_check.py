"""At start: a workspace the app cannot write to (read-only media, no permission) is said at once, with a dialog
offering another folder, instead of failing at the first save. The decision (engine/workspace.workspace_problem)
is the engine's; this module asks the person."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import QAbstractButton, QFileDialog, QMessageBox, QWidget

from desktop_app.engine.workspace import Workspace, startup_root, workspace_problem

MAX_ASKS = 20  # a person who keeps choosing unusable folders is asked again; a loop never is endless
CHOOSE, LOOK_ONLY, QUIT = "choose", "look only", "quit"
Ask = Callable[[str, Path], Path | None]  # (problem, folder) -> another folder, the same one (look only), or None


def usable_workspace(root: Path, ask: Ask) -> Workspace | None:
    """The workspace to open: `root` when the app can write there; else whatever `ask` answers (another folder,
    checked the same way; the same folder to look at it read-only, when it holds a workspace already); None when
    the person quits."""
    tried = Path(root)
    for _ in range(MAX_ASKS):
        problem = workspace_problem(tried)
        if problem is None:
            return Workspace.open(tried)
        chosen = ask(problem, tried)
        if chosen is None:
            return None
        if Path(chosen) == tried:  # look only: its runs and models can be read; saving will say why it cannot
            with contextlib.suppress(OSError):
                return Workspace.open(tried)
        tried = Path(chosen)
    return None


def startup_workspace(explicit: str, last: str, ask: Ask) -> Workspace | None:
    """The window's workspace at start (startup_root's choice), checked by usable_workspace."""
    return usable_workspace(startup_root(explicit, last), ask)


def workspace_box(problem: str, root: Path, parent: QWidget | None = None
                  ) -> tuple[QMessageBox, dict[str, QAbstractButton]]:
    """The question: the problem in one sentence, and Choose another folder… / Look only (when `root` holds a
    workspace to look at) / Quit."""
    box = QMessageBox(QMessageBox.Icon.Warning, "Cannot write to the workspace",
                      f"{problem}.\n\nThe app keeps datasets, models and runs in its workspace folder: choose "
                      "another folder for it.", QMessageBox.StandardButton.NoButton, parent)
    buttons = {CHOOSE: box.addButton("Choose another folder…", QMessageBox.ButtonRole.AcceptRole)}
    if root.is_dir():
        buttons[LOOK_ONLY] = box.addButton("Look only (nothing can be saved)", QMessageBox.ButtonRole.ActionRole)
    buttons[QUIT] = box.addButton("Quit", QMessageBox.ButtonRole.RejectRole)
    box.setDefaultButton(buttons[CHOOSE])  # type: ignore[arg-type]
    return box, buttons


def _run_box(box: QMessageBox) -> QAbstractButton | None:
    box.exec()
    return box.clickedButton()


def _pick_folder(start: Path, parent: QWidget | None) -> str:
    return QFileDialog.getExistingDirectory(parent, "Choose a workspace folder", str(start))


def dialog_ask(parent: QWidget | None = None, run_box: Callable[[QMessageBox], QAbstractButton | None] = _run_box,
               pick_folder: Callable[[Path, QWidget | None], str] = _pick_folder) -> Ask:
    """`ask` for usable_workspace through the dialog (tests pass their own run_box and pick_folder). Cancelling the
    folder picker shows the question again."""

    def ask(problem: str, root: Path) -> Path | None:
        for _ in range(MAX_ASKS):
            box, buttons = workspace_box(problem, root, parent)
            clicked = run_box(box)
            box.deleteLater()
            if clicked is not None and clicked is buttons.get(LOOK_ONLY):
                return root
            if clicked is None or clicked is not buttons[CHOOSE]:  # Quit, or the box closed
                return None
            folder = pick_folder(root.parent if not root.is_dir() else root, parent)
            if folder:
                return Path(folder)
        return None

    return ask
