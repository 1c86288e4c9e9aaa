"""Exceptions that escape a Qt slot, or a thread the background runner does not hold, reach the window: an error
line in the status bar, the error dialog and the workspace's error log (ctx.report_exception), not only a terminal
that a person who started the app from its icon never sees.

The hooks are chained: the previous ones still run (they print the traceback to the terminal, and under pytest-qt
they fail the test), and `uninstall` puts them back when the window closes."""

from __future__ import annotations

import logging
import sys
import threading
import time
from types import TracebackType

from PySide6.QtCore import QObject, Signal

from desktop_app.engine.os_faults import fixable
from desktop_app.ui.context import AppContext

log = logging.getLogger(__name__)

REPEAT_S = 2.0  # the same error again within this many seconds is not shown again (a paint event failing on a loop)


class ExceptionRouter(QObject):
    """While installed, `sys.excepthook` and `threading.excepthook` report every uncaught exception to `ctx`."""

    raised = Signal(object)  # the exception; from any thread, handled in the GUI thread (a queued connection)

    def __init__(self, ctx: AppContext, parent: QObject | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.installed = False
        self._previous_sys = sys.excepthook
        self._previous_thread = threading.excepthook
        self._last: tuple[str, float] = ("", 0.0)
        self.raised.connect(self._report)

    def install(self) -> None:
        if self.installed:
            return
        self._previous_sys, self._previous_thread = sys.excepthook, threading.excepthook
        sys.excepthook = self.sys_hook
        threading.excepthook = self.thread_hook
        self.installed = True

    def uninstall(self) -> None:
        """Put the previous hooks back (a hook installed over ours since keeps its place: ours then only passes
        exceptions on to the previous one). Safe to call twice."""
        if not self.installed:
            return
        self.installed = False
        if sys.excepthook == self.sys_hook:
            sys.excepthook = self._previous_sys
        if threading.excepthook == self.thread_hook:
            threading.excepthook = self._previous_thread

    def sys_hook(self, exc_type: type[BaseException], exc: BaseException,
                 tb: TracebackType | None) -> None:
        """An exception no code caught in the GUI thread (a slot, an event handler, a timer)."""
        self._previous_sys(exc_type, exc, tb)
        if self.installed and not issubclass(exc_type, KeyboardInterrupt):
            self._send(exc)

    def thread_hook(self, args: threading.ExceptHookArgs) -> None:
        """An exception that ended a thread; reported in the GUI thread, as widgets live there."""
        self._previous_thread(args)
        if self.installed and args.exc_type is not SystemExit:
            self._send(args.exc_value if args.exc_value is not None else args.exc_type())

    def _send(self, exc: BaseException) -> None:
        try:
            self.raised.emit(exc)
        except RuntimeError:  # the window is gone (its Qt object deleted): the terminal has it already
            log.error("an error after the window closed: %s: %s", type(exc).__name__, exc)

    def _report(self, exc: BaseException) -> None:
        text, now = f"{type(exc).__name__}: {exc}", time.monotonic()
        last_text, last_time = self._last
        self._last = (text, now)
        if text == last_text and now - last_time < REPEAT_S:
            return
        # a full disk or a read-only folder is no surprise to report as one: the person can fix it
        self.ctx.report_exception(exc, title="Something went wrong" if fixable(exc) else "Unexpected error")
