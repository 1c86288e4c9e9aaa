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


def test_background_work_keeps_older_objects_out_of_the_collectors_sight(window, qtbot) -> None:
    """While a task runs, what existed before it is frozen (a full collection walks only the task's own objects: over
    a loaded app's ~550k objects a full pass held the GUI thread for 0.55 s); once no task runs, everything is back in
    sight and a cycle that died meanwhile is collected."""
    import gc
    import time

    class Node:
        pass

    older = Node()
    older.me = older  # a cycle from before the task
    died = []
    ref = weakref.ref(older, lambda _: died.append(True))
    release = threading.Event()

    def slow_task():
        yield "working"
        release.wait(30)

    gc.unfreeze()  # whatever an earlier test left
    window.ctx.runner.start("test-job", slow_task)
    qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=5000)
    del older  # it dies during the task: frozen, so a full collection now leaves it alone (and is quick)
    gc.collect()
    assert ref() is not None and not died
    release.set()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("test-job"), timeout=10000)
    qtbot.waitUntil(lambda: gc.get_freeze_count() == 0, timeout=5000)
    deadline = time.monotonic() + 5
    while ref() is not None and time.monotonic() < deadline:
        gc.collect()  # what the guard's timer does when its thresholds say so
        qtbot.wait(50)
    assert ref() is None and died == [True]
