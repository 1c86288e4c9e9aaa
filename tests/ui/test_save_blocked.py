"""The window while a save is blocked (a full disk): the run display shows a banner with the engine's one line and
Retry / Save elsewhere… / Stop; each answer reaches the run, which goes on (or ends) with nothing committed lost."""

from __future__ import annotations

import pytest
from disk_faults import FullDisk
from ui_helpers import TINY

from desktop_app.engine import run_folder as rf
from desktop_app.engine.events import Controls, SaveBlocked
from desktop_app.ui.widgets.save_blocked_banner import SaveBlockedBanner, blocked_text


def _start(window, workspace) -> None:
    tab = window.train_tab
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(workspace.folder("datasets") / "tiny-data"))
    window.model_tab.set_spec(TINY)
    spec = tab.setup.form.spec().replace(steps=6, batch_size=4, eval_every=0, save_every=2, warmup_steps=2,
                                         sample_tokens=0, log_every=1)
    tab.setup.form.set_spec(spec)
    assert tab.start()


def _blocked(window, qtbot) -> SaveBlockedBanner:
    banner = window.train_tab.run_view.blocked_banner
    qtbot.waitUntil(lambda: banner.isVisibleTo(window.train_tab), timeout=60000)
    return banner


def _ended(window, qtbot) -> None:
    qtbot.waitUntil(lambda: not window.train_tab.running, timeout=60000)


def test_banner_retry_continues_the_run(window, populated_workspace, qtbot, monkeypatch):
    disk = FullDisk(monkeypatch)
    _start(window, populated_workspace)
    banner = _blocked(window, qtbot)
    tab = window.train_tab
    text = banner.label.text()
    assert text.startswith("Training is paused at step 4: saving the step 4 checkpoint failed: the disk is full")
    assert "The last checkpoint is intact" in text and "bug" not in text
    assert tab.running and "paused at step 4" in tab.run_view.progress.format()
    assert [rf.step_of(p) for p in rf.list_committed(tab.run_dir)] == [2]
    assert not window.ctx.errors  # a banner, not an error dialog
    disk.free()
    qtbot.mouseClick(banner.retry_btn, qtbot_left())
    _ended(window, qtbot)
    assert tab.run_view.last_finished.reason == "completed" and tab.run_view.last_finished.step == 6
    assert not banner.isVisibleTo(tab)
    assert [rf.step_of(p) for p in rf.list_committed(tab.run_dir)] == [2, 4, 6]
    assert not window.ctx.errors, window.ctx.errors


def test_banner_save_elsewhere_moves_the_run(window, populated_workspace, qtbot, monkeypatch, tmp_path):
    other = tmp_path / "other disk"
    FullDisk(monkeypatch, spare=other)
    _start(window, populated_workspace)
    old = window.train_tab.run_dir
    banner = _blocked(window, qtbot)
    asked = []
    banner.choose_folder = lambda parent, start: asked.append(start) or str(other)
    qtbot.mouseClick(banner.elsewhere_btn, qtbot_left())
    _ended(window, qtbot)
    tab = window.train_tab
    assert asked == [str(rf.checkpoints_dir(old))]
    assert tab.run_view.last_finished.reason == "completed" and tab.run_dir == other
    assert [rf.step_of(p) for p in rf.list_committed(old)] == [2]
    assert [rf.step_of(p) for p in rf.list_committed(other)] == [4, 6]
    assert tab.run_view.plots.point_count("loss") == 6  # the curve came along
    assert "keeps its checkpoints up to step 2" in tab.run_view.log_view.toPlainText()
    assert not window.ctx.errors, window.ctx.errors


def test_banner_stop_ends_the_run_with_the_last_checkpoint(window, populated_workspace, qtbot, monkeypatch):
    FullDisk(monkeypatch)
    _start(window, populated_workspace)
    banner = _blocked(window, qtbot)
    qtbot.mouseClick(banner.stop_btn, qtbot_left())
    _ended(window, qtbot)
    tab = window.train_tab
    finished = tab.run_view.last_finished
    assert finished.reason == "stopped" and "without saving it" in finished.message
    assert [rf.step_of(p) for p in rf.list_committed(tab.run_dir)] == [2]
    rf.verify_checkpoint(rf.list_committed(tab.run_dir)[0])
    assert not banner.isVisibleTo(tab) and not window.ctx.errors


def test_banner_cancelled_folder_choice_answers_nothing(qtbot):
    banner = SaveBlockedBanner()
    qtbot.addWidget(banner)
    controls = Controls()
    banner.follow(controls)
    assert controls.answers_faults
    banner.show_blocked(SaveBlocked(step=3, message="saving the step 3 checkpoint failed: the disk is full",
                                    folder="/x", needed=2_000_000, free=0))
    banner.choose_folder = lambda parent, start: ""  # the person closed the dialog
    banner.elsewhere_btn.click()
    assert not controls.retry.is_set() and banner.retry_btn.isEnabled()
    banner.retry_btn.click()
    assert controls.take_decision() == (True, "") and not banner.retry_btn.isEnabled()


@pytest.mark.parametrize(("message", "extra"), [("the disk is full", " (2.0 MB needed, 0 bytes free)"),
                                                ("the disk is full (/x; 1 MB free)", "")])
def test_blocked_text_adds_the_space_only_when_the_line_lacks_it(message, extra):
    event = SaveBlocked(step=3, message=message, folder="/x", needed=2_000_000, free=0)
    assert blocked_text(event).startswith(f"Training is paused at step 3: {message}{extra}. ")


def qtbot_left():
    from PySide6.QtCore import Qt

    return Qt.MouseButton.LeftButton
