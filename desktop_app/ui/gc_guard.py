"""Cyclic garbage collection in the GUI thread only.

Python's cyclic collector runs in whichever thread happens to allocate when a threshold is crossed. If that
is a worker (training, generation) and the garbage holds Qt objects, their C++ destructors run in the worker
while the GUI thread may hold a Qt lock and wait for the GIL: a deadlock (seen in the tests: a QAction
destructor in the GUI thread against a collected QObject in the training thread). So automatic collection
is switched off and a GUI-thread timer collects with the same thresholds (the pattern Qt apps such as
calibre and pyqtgraph's examples use).
"""

from __future__ import annotations

import gc

from PySide6.QtCore import QObject, QTimer

_guard: MainThreadGC | None = None


class MainThreadGC(QObject):
    def __init__(self, interval_ms: int = 200):
        super().__init__()
        self.timer = QTimer(self)
        self.timer.setInterval(interval_ms)
        self.timer.timeout.connect(self.collect_if_due)
        gc.disable()
        self.timer.start()

    def collect_if_due(self) -> None:
        # The youngest generation every tick (cheap); older ones when CPython's own thresholds say so.
        _, c1, c2 = gc.get_count()
        _, t1, t2 = gc.get_threshold()
        gc.collect(2 if c2 > t2 else 1 if c1 > t1 else 0)


def hold(busy: bool) -> None:
    """While background work runs (training, generation), keep the objects that existed when it started out of the
    collector's sight: a full collection then walks only what that work made, not the whole loaded app (a full pass
    over the ~550k objects of torch, transformers and the window held the GUI thread for 0.55 s: a live plot froze).
    Idle again, everything is back in sight, and cycles that died meanwhile go at the next full collection."""
    if busy:
        gc.freeze()
    elif gc.get_freeze_count():
        gc.unfreeze()


def install() -> MainThreadGC:
    """Start the guard once per process (call from the GUI thread after the QApplication exists)."""
    global _guard
    if _guard is None:
        _guard = MainThreadGC()
    return _guard
