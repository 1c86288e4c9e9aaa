"""Nothing fails silently: an exception that escapes a Qt slot or a stray thread shows in the window (ctx.errors, the
status bar) and in the workspace's error log; F1 shows the documentation in the window where no browser opens it."""

from __future__ import annotations

import sys
import threading

import pytest
from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QDesktopServices

from desktop_app.ui import help as help_module
from desktop_app.ui.exception_hooks import ExceptionRouter


class Emitter(QObject):
    fired = Signal()


def _error_log(window) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in sorted(window.ctx.workspace.log_dir.glob("error-*.log")))


def _reinstall(window, monkeypatch, hooks: dict[str, list]) -> None:
    """Put collecting hooks under the window's router: they stand for the terminal (and show the chain holds)."""
    router = window.exception_router
    router.uninstall()
    monkeypatch.setattr(sys, "excepthook", lambda t, v, tb: hooks["sys"].append(v))
    monkeypatch.setattr(threading, "excepthook", lambda args: hooks["thread"].append(args.exc_value))
    router.install()


def test_the_window_installs_its_hooks_and_closing_it_restores_the_previous_ones(qtbot, workspace, settings):
    from desktop_app.ui.main_window import MainWindow

    before_sys, before_thread = sys.excepthook, threading.excepthook
    win = MainWindow(workspace, settings=settings, preload=False, offer_resume=False)
    win.ctx.dialogs_enabled = False
    qtbot.addWidget(win)
    assert sys.excepthook == win.exception_router.sys_hook
    assert threading.excepthook == win.exception_router.thread_hook
    win.close()
    assert sys.excepthook == before_sys
    assert threading.excepthook == before_thread


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_slot_reaches_the_window_and_the_log(window, qtbot, monkeypatch):
    hooks: dict[str, list] = {"sys": [], "thread": []}
    _reinstall(window, monkeypatch, hooks)
    emitter = Emitter()

    def broken_slot() -> None:
        raise ValueError("the slot broke")

    emitter.fired.connect(broken_slot)
    emitter.fired.emit()
    qtbot.waitUntil(lambda: bool(window.ctx.errors))
    message, details = window.ctx.errors[-1]
    assert message == "ValueError: the slot broke"
    assert "broken_slot" in details  # the traceback, for the "copy details" button
    assert "the slot broke" in window.statusBar().currentMessage()
    assert "the slot broke" in _error_log(window) and "broken_slot" in _error_log(window)
    assert [str(e) for e in hooks["sys"]] == ["the slot broke"]  # the terminal still gets it

    def broken_timer() -> None:
        raise KeyError("from a timer")

    QTimer.singleShot(0, broken_timer)  # raised inside the event loop, not from a Python emit
    qtbot.waitUntil(lambda: len(window.ctx.errors) == 2)
    assert window.ctx.errors[-1][0] == "KeyError: 'from a timer'"


@pytest.mark.qt_no_exception_capture
def test_the_same_error_again_at_once_is_shown_once(window, qtbot, monkeypatch):
    hooks: dict[str, list] = {"sys": [], "thread": []}
    _reinstall(window, monkeypatch, hooks)
    emitter = Emitter()

    def broken_slot() -> None:
        raise RuntimeError("every repaint fails")

    emitter.fired.connect(broken_slot)
    for _ in range(5):
        emitter.fired.emit()
    qtbot.waitUntil(lambda: len(hooks["sys"]) == 5)
    assert [m for m, _ in window.ctx.errors] == ["RuntimeError: every repaint fails"]


def test_an_exception_that_ends_a_thread_reaches_the_window(window, qtbot, monkeypatch):
    hooks: dict[str, list] = {"sys": [], "thread": []}
    _reinstall(window, monkeypatch, hooks)

    def stray_worker() -> None:
        raise OSError("the disk went away")

    thread = threading.Thread(target=stray_worker, name="stray-worker")
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: bool(window.ctx.errors))  # delivered in the GUI thread (widgets live there)
    message, details = window.ctx.errors[-1]
    assert message == "OSError: the disk went away"
    assert "stray_worker" in details
    assert "the disk went away" in _error_log(window)
    assert [str(e) for e in hooks["thread"]] == ["the disk went away"]


def test_a_router_no_longer_installed_only_passes_exceptions_on(qtbot, window, monkeypatch):
    seen: list[BaseException] = []
    monkeypatch.setattr(sys, "excepthook", lambda t, v, tb: seen.append(v))
    router = ExceptionRouter(window.ctx)
    router.install()
    other = sys.excepthook  # a hook installed over ours later keeps its place when ours is removed
    monkeypatch.setattr(sys, "excepthook", lambda t, v, tb: other(t, v, tb))
    router.uninstall()
    exc = ValueError("after the window closed")
    sys.excepthook(ValueError, exc, None)
    assert seen == [exc]
    assert window.ctx.errors == []


# --- F1: the documentation ---
def _no_browser(monkeypatch) -> list[str]:
    asked: list[str] = []

    def open_url(url) -> bool:
        asked.append(url.toLocalFile())
        return False

    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(open_url))
    return asked


def test_f1_shows_the_documentation_in_the_window_when_no_browser_opens_it(window, monkeypatch):
    asked = _no_browser(monkeypatch)
    readme = help_module.docs_file()
    assert readme is not None
    assert window.act_docs.shortcut().toString() == "F1"
    window.act_docs.trigger()
    assert asked == [str(readme)]
    dialog = window.docs_dialog
    assert dialog is not None and dialog.isVisible()
    title = readme.read_text(encoding="utf-8").splitlines()[0].lstrip("# ").strip()
    shown = dialog.browser.toPlainText()
    assert shown.startswith(title) and "#" not in shown.splitlines()[0]  # rendered, not the markdown source
    assert str(readme) in window.statusBar().currentMessage()  # and where the file is
    assert window.ctx.errors == []
    dialog.close()


def test_f1_opens_the_browser_when_one_does(window, monkeypatch):
    opened: list[str] = []
    monkeypatch.setattr(QDesktopServices, "openUrl", staticmethod(lambda url: opened.append(url.toLocalFile()) or True))
    window.act_docs.trigger()
    assert opened == [str(help_module.docs_file())]
    assert window.docs_dialog is None


def test_f1_without_the_readme_says_where_the_documentation_is(window, monkeypatch):
    asked = _no_browser(monkeypatch)
    monkeypatch.setattr(help_module, "docs_file", lambda: None)
    window.act_docs.trigger()
    assert asked == []
    assert window.docs_dialog is None
    assert "README.md" in window.statusBar().currentMessage()


def test_f1_with_an_unreadable_readme_is_a_clear_error(window, monkeypatch, tmp_path):
    _no_browser(monkeypatch)
    broken = tmp_path / "README.md"
    broken.write_bytes(b"\xff\xfe not text \xff")
    monkeypatch.setattr(help_module, "docs_file", lambda: broken)
    window.act_docs.trigger()
    assert window.docs_dialog is None
    message, _details = window.ctx.errors[-1]
    assert "No browser opened the documentation" in message and str(broken) in message
    assert broken.read_bytes() == b"\xff\xfe not text \xff"  # nothing touched
