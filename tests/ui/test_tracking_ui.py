"""Tracking in the window: the Train form's "Also track the run in" check boxes, and Open in TensorBoard (a child
process on a free port, the browser opened once it answers; hidden where TensorBoard is not installed)."""

from __future__ import annotations

import sys
from pathlib import Path

from PySide6.QtCore import QProcess
from PySide6.QtWidgets import QWidget

from desktop_app.engine.events import RunFolder
from desktop_app.engine.train import tracking
from desktop_app.ui.widgets import run_view as run_view_module
from desktop_app.ui.widgets import tensorboard_launcher
from desktop_app.ui.widgets.run_view import RunView


def test_the_train_form_sets_the_trackers(window):
    form = window.train_tab.setup.form
    checks = form.editors["trackers"].checks
    assert list(checks) == ["tensorboard", "mlflow", "wandb"]
    assert form.spec().trackers == ["tensorboard"]  # the default
    for name, check in checks.items():  # words a person reads, and whether this machine has the library
        shown = check.text().replace("&&", "&")  # "&&" shows one "&", never a shortcut
        assert shown.startswith(("TensorBoard", "MLflow", "Weights & Biases"))
        assert check.text().endswith("(not installed)") != tracking.installed(name)
    form.set_value("trackers", ["mlflow", "wandb"])
    assert form.spec().trackers == ["mlflow", "wandb"]
    assert not checks["tensorboard"].isChecked()


def _run_with_events(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "events.out.tfevents.1.host.1.0").write_bytes(b"")
    return run


def shown_run_view(qtbot, tmp_path, monkeypatch):
    """A run view showing a run with TensorBoard event files, TensorBoard taken as installed: (view, run folder)."""
    monkeypatch.setattr(run_view_module, "installed", lambda name: True)
    view = RunView(QWidget())
    qtbot.addWidget(view)
    run = _run_with_events(tmp_path)
    view.show(RunFolder(str(run)))
    return view, run


def test_open_in_tensorboard_is_offered_only_where_it_can_work(qtbot, tmp_path, monkeypatch):
    view = RunView(QWidget())
    qtbot.addWidget(view)
    run = _run_with_events(tmp_path)
    monkeypatch.setattr(run_view_module, "installed", lambda name: False)
    view.show(RunFolder(str(run)))
    assert view.tensorboard_btn.isHidden()  # TensorBoard not installed
    monkeypatch.setattr(run_view_module, "installed", lambda name: True)
    view.show(RunFolder(str(tmp_path)))
    assert view.tensorboard_btn.isHidden()  # no event files in that folder
    view.show(RunFolder(str(run)))
    assert not view.tensorboard_btn.isHidden()


def test_open_in_tensorboard_serves_the_run_and_opens_the_browser(qtbot, tmp_path, monkeypatch):
    """TensorBoard itself is stood in for by a small web server on the port it is given (a real one takes seconds
    to start): what is tested is the child process, the wait for its port and the browser."""
    started: list[list[str]] = []

    def command(logdir, port):
        started.append([str(logdir), str(port)])
        return [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(logdir)]

    opened: list[str] = []
    monkeypatch.setattr(tensorboard_launcher, "tensorboard_command", command)
    monkeypatch.setattr(tensorboard_launcher.QDesktopServices, "openUrl", lambda url: opened.append(url.toString()))
    view, run = shown_run_view(qtbot, tmp_path, monkeypatch)
    view.tensorboard_btn.click()
    qtbot.waitUntil(lambda: bool(opened), timeout=20000)
    port = started[0][1]
    assert started == [[str(run), port]] and opened == [f"http://127.0.0.1:{port}/"]
    assert f"TensorBoard shows this run at http://127.0.0.1:{port}/" in view.log_view.toPlainText()
    view.tensorboard_btn.click()  # again: the same server, the browser opened again
    qtbot.waitUntil(lambda: len(opened) == 2, timeout=5000)
    assert len(started) == 1
    process = view.tensorboard.servers[str(run)][0]
    view.stop_timers()  # the window closes: its TensorBoards end
    assert process.state() == QProcess.ProcessState.NotRunning and not view.tensorboard.servers


def test_a_tensorboard_that_does_not_start_is_said_in_the_log(qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(tensorboard_launcher, "tensorboard_command",
                        lambda logdir, port: [sys.executable, "-c", "import sys; sys.exit('no such logdir')"])
    view, _folder = shown_run_view(qtbot, tmp_path, monkeypatch)
    view.tensorboard_btn.click()
    qtbot.waitUntil(lambda: "TensorBoard did not start" in view.log_view.toPlainText(), timeout=20000)
    text = view.log_view.toPlainText()
    assert "no such logdir" in text and "tensorboard --logdir" in text
    assert not view.tensorboard.servers
