"""A workspace the app cannot write to is said at start with a dialog offering another folder (the decision is the
engine's; the dialog's wiring is tested with its buttons pressed by the test, as pop-ups are off), and the window's
error reporting says an OS fault a person can fix as one sentence: no traceback, no "bug"."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from desktop_app.engine.workspace import KINDS, startup_root, workspace_problem
from desktop_app.ui import workspace_check
from desktop_app.ui.workspace_check import CHOOSE, LOOK_ONLY, QUIT, dialog_ask, usable_workspace, workspace_box


def _read_only(monkeypatch, folder: Path) -> None:
    """Creating a file or folder inside `folder` fails as on read-only media (os.open / os.mkdir: works as root)."""
    real_open, real_mkdir = os.open, os.mkdir
    inside = str(folder.resolve())

    def refused(path) -> bool:
        p = str(Path(os.fsdecode(path)).resolve())
        return p == inside or p.startswith(inside + os.sep)

    def fake_open(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and refused(path):
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
        return real_open(path, flags, *args, **kwargs)

    def fake_mkdir(path, *args, **kwargs):
        if refused(path) and not Path(os.fsdecode(path)).exists():
            raise OSError(errno.EROFS, "Read-only file system", os.fsdecode(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", fake_open)
    monkeypatch.setattr(os, "mkdir", fake_mkdir)


@pytest.fixture
def media(tmp_path, monkeypatch):
    """A read-only folder that already holds a workspace (a DVD, a mounted read-only share)."""
    folder = tmp_path / "media"
    for kind in (*KINDS, "logs"):
        (folder / kind).mkdir(parents=True)
    _read_only(monkeypatch, folder)
    return folder


def test_the_problem_is_one_sentence_and_a_writable_folder_has_none(media, tmp_path):
    assert workspace_problem(media) == (f"writing to the workspace failed: the disk is read-only ({media}): "
                                        "choose a folder you can write to")
    assert workspace_problem(tmp_path / "fresh") is None
    (tmp_path / "a-file").write_text("x")
    assert "cannot be the workspace" in workspace_problem(tmp_path / "a-file")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root writes into a 0555 folder anyway")
def test_a_folder_without_permission_is_a_problem(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        assert "permission denied" in workspace_problem(folder)
    finally:
        folder.chmod(0o755)


def test_the_start_folder_is_the_one_asked_for_then_the_environment_then_the_last(monkeypatch, tmp_path):
    monkeypatch.setenv("AZR_WORKSPACE", str(tmp_path / "env"))
    assert startup_root(tmp_path / "given", tmp_path) == tmp_path / "given"
    assert startup_root("", tmp_path) == tmp_path / "env"
    monkeypatch.delenv("AZR_WORKSPACE")
    assert startup_root("", tmp_path) == tmp_path
    assert startup_root("", tmp_path / "gone") != tmp_path / "gone"  # a vanished last folder: the default


def test_another_folder_chosen_in_the_dialog_becomes_the_workspace(media, tmp_path):
    asked = []
    other = tmp_path / "other"
    workspace = usable_workspace(media, lambda problem, root: asked.append((problem, root)) or other)
    assert workspace is not None and workspace.root == other
    assert (other / "runs").is_dir()
    assert asked == [(workspace_problem(media), media)]


def test_look_only_keeps_the_read_only_workspace_and_quit_opens_none(media):
    workspace = usable_workspace(media, lambda _p, root: root)
    assert workspace is not None and workspace.root == media
    assert usable_workspace(media, lambda _p, _r: None) is None


def test_an_unusable_choice_is_asked_about_again(media, tmp_path, monkeypatch):
    second = tmp_path / "media" / "inside"  # read-only too
    answers = iter([second, tmp_path / "good"])
    problems = []
    workspace = usable_workspace(media, lambda p, _r: problems.append(p) or next(answers))
    assert workspace is not None and workspace.root == tmp_path / "good"
    assert len(problems) == 2 and str(second) in problems[1]


def test_the_dialog_offers_another_folder_look_only_and_quit(qtbot, media, tmp_path):
    problem = workspace_problem(media)
    box, buttons = workspace_box(problem, media)
    assert set(buttons) == {CHOOSE, LOOK_ONLY, QUIT}
    assert box.text().startswith(problem) and "choose another folder" in box.text()
    assert buttons[CHOOSE].text() == "Choose another folder…"
    box.deleteLater()
    _box, no_workspace_there = workspace_box(problem, tmp_path / "missing")
    assert set(no_workspace_there) == {CHOOSE, QUIT}  # nothing to look at
    _box.deleteLater()


@pytest.mark.parametrize("press, picked, expected", [
    ([CHOOSE], ["/elsewhere"], Path("/elsewhere")),
    ([CHOOSE, CHOOSE], ["", "/second"], Path("/second")),  # the folder picker cancelled: asked again
    ([LOOK_ONLY], [], "root"),
    ([QUIT], [], None),
    ([None], [], None),  # the box closed with Escape
])
def test_the_dialog_wiring(qtbot, media, press, picked, expected):
    presses, picks, boxes = iter(press), iter(picked), []

    def run_box(box):
        boxes.append(box)
        choice = next(presses)
        return None if choice is None else box_buttons(box)[choice]

    def box_buttons(box):
        by_text = {b.text(): b for b in box.buttons()}
        return {CHOOSE: by_text["Choose another folder…"], LOOK_ONLY: by_text["Look only (nothing can be saved)"],
                QUIT: by_text["Quit"]}

    ask = dialog_ask(None, run_box=run_box, pick_folder=lambda _start, _parent: next(picks))
    answer = ask(workspace_problem(media), media)
    assert answer == (media if expected == "root" else expected)
    assert len(boxes) == len(press)


def test_the_app_refuses_an_unwritable_workspace_without_a_dialog_in_one_line(media, capsys, monkeypatch):
    from desktop_app import app

    monkeypatch.setattr(workspace_check, "dialog_ask", lambda *a, **k: pytest.fail("no dialog in a smoke test"))
    assert app._checked_workspace(str(media), "", ask=False) is None
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {workspace_problem(media)}"]


def test_the_app_uses_the_folder_the_person_chooses(media, tmp_path, monkeypatch):
    from desktop_app import app

    monkeypatch.setattr(workspace_check, "dialog_ask", lambda *a, **k: (lambda _p, _r: tmp_path / "chosen"))
    workspace = app._checked_workspace(str(media), "", ask=True)
    assert workspace is not None and workspace.root == tmp_path / "chosen"


def test_the_window_says_a_full_disk_in_one_sentence(window):
    exc = OSError(errno.ENOSPC, "No space left on device", "/data/exports/model")
    window.ctx.report_exception(exc, title="Export failed")
    message, details = window.ctx.errors[-1]
    assert details == ""
    assert message.startswith("This failed: the disk is full (/data/exports/model")
    assert "bug" not in message.lower() and "Traceback" not in message


def test_an_uncaught_fault_in_a_slot_is_no_unexpected_error(window, qtbot, monkeypatch):
    titles = []
    monkeypatch.setattr(window.ctx, "report_exception", lambda exc, title="": titles.append((type(exc), title)))
    router = window.exception_router
    router._report(PermissionError(errno.EACCES, "Permission denied", "/srv/x"))
    router._report(ValueError("a bug"))
    assert titles == [(PermissionError, "Something went wrong"), (ValueError, "Unexpected error")]


def test_open_workspace_on_read_only_media_keeps_the_current_one_and_says_why(window, media):
    before = window.ctx.workspace.root
    window.set_workspace(media)
    assert window.ctx.workspace.root == before
    message, details = window.ctx.errors[-1]
    assert details == "" and "the disk is read-only" in message and str(media) in message and "bug" not in message
