"""Cyclic garbage with Qt objects is collected in the GUI thread, never in a worker thread."""

from __future__ import annotations

import gc
import threading
import weakref

from PySide6.QtCore import QObject

from desktop_app.ui import gc_guard


def test_cycles_are_collected_by_the_gui_thread_timer(qtbot) -> None:
    guard = gc_guard.install()
    assert not gc.isenabled() and guard.timer.isActive()
    died_in: list[str] = []

    refs = []

    class Holder(QObject):
        def __init__(self):
            super().__init__()
            self.me = self  # a reference cycle holding a Qt object
            refs.append(weakref.ref(self, lambda _: died_in.append(threading.current_thread().name)))

    def worker() -> None:
        for _ in range(50):
            Holder()
        junk = [[i] for i in range(100_000)]  # allocations that would trigger automatic collection
        del junk

    thread = threading.Thread(target=worker, name="worker")
    thread.start()
    thread.join()
    assert died_in == []  # nothing was collected in the worker
    qtbot.waitUntil(lambda: len(died_in) == 50, timeout=5000)
    assert set(died_in) == {threading.main_thread().name}
