"""Run any engine iterator in a QThread and re-emit what it yields as Qt signals.

Knows nothing about ML: a task is "a callable that returns an iterator" plus optional Controls. The
callable runs *in the worker thread*, so heavy imports and model loading it does never block the GUI.

Why this shape (see ARCHITECTURE.md):
- cancel is a direct call that sets threading.Events: a queued slot would never run while the worker
  loops;
- starting a new task of a kind cancels the old one and silences it (its late events are dropped), the
  way Orange3 handles stale tasks;
- the GUI-side `Task` object outlives the thread, so tests and tabs wait on a long-lived object's
  signal, never on one that is being deleted.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from PySide6.QtCore import QObject, Qt, QThread, Signal, Slot

from desktop_app.engine.events import Controls
from desktop_app.engine.fault_report import error_parts

log = logging.getLogger(__name__)

# Every task this module started whose thread has not ended yet (tests fail if one is left behind).
_LIVE_TASKS: weakref.WeakSet[Task] = weakref.WeakSet()


def live_tasks() -> list[Task]:
    out = []
    for task in list(_LIVE_TASKS):
        thread = task._thread
        if thread is not None and _alive(thread):
            out.append(task)
    return out


def cancel_all(timeout_ms: int = 30000) -> int:
    """Cancel and wait for every live task (last-resort cleanup); returns how many were still running."""
    tasks = live_tasks()
    for task in tasks:
        task.cancel()
    for task in tasks:
        task.wait(timeout_ms)
    return len(tasks)


def _alive(thread: QThread) -> bool:
    try:
        return thread.isRunning()
    except RuntimeError:  # the C++ object is gone
        return False


class _Worker(QObject):
    """Lives in the worker thread; iterates the task's iterator."""

    produced = Signal(object)
    failed = Signal(str, str)
    done = Signal()

    def __init__(self, factory: Callable[[], Iterable[Any]], cancelled: threading.Event):
        super().__init__()
        self._factory = factory
        self._cancelled = cancelled

    @Slot()
    def run(self) -> None:
        iterator: Iterator[Any] | None = None
        try:
            iterator = iter(self._factory())
            for item in iterator:
                if self._cancelled.is_set():
                    break
                self.produced.emit(item)
        except BaseException as exc:

            # a UserError or an OS fault the person can fix (full disk, read-only folder): one sentence, no traceback
            self.failed.emit(*error_parts(exc))
        finally:
            if iterator is not None and hasattr(iterator, "close"):
                try:
                    iterator.close()  # runs the generator's finally blocks (files closed, state saved)
                except Exception:
                    log.exception("closing a background iterator failed")
            self.done.emit()


class Task(QObject):
    """GUI-thread handle of one background task. Signals: produced(object), failed(str, str), finished()."""

    produced = Signal(object)
    failed = Signal(str, str)
    finished = Signal()

    def __init__(self, kind: str, controls: Controls | None, parent: QObject | None = None):
        super().__init__(parent)
        self.kind = kind
        self.controls = controls
        self._cancelled = threading.Event()
        self._stale = False
        self.running = True
        self.error: tuple[str, str] | None = None
        self.items = 0
        self._thread: QThread | None = None
        self._worker: _Worker | None = None

    # --- control (direct calls, safe from the GUI thread while the worker loops) ---
    def stop(self) -> None:
        """Graceful stop: the engine finishes its step, saves and ends (Controls.stop)."""
        if self.controls is not None:
            self.controls.stop.set()
        else:
            self._cancelled.set()

    def cancel(self) -> None:
        """Stop and also drop whatever the iterator still yields."""
        if self.controls is not None:
            self.controls.stop.set()
        self._cancelled.set()

    def pause(self, paused: bool = True) -> None:
        if self.controls is not None:
            (self.controls.pause.set if paused else self.controls.pause.clear)()

    def save_now(self) -> None:
        if self.controls is not None:
            self.controls.save_now.set()

    def silence(self) -> None:
        """Drop every later event of this task (a newer task of the same kind replaced it)."""
        self._stale = True

    @property
    def stale(self) -> bool:
        return self._stale

    def wait(self, timeout_ms: int = 30000) -> bool:
        """Block until the thread ended (used at shutdown only)."""
        thread = self._thread
        if thread is None or not _alive(thread):
            return True
        return bool(thread.wait(timeout_ms))

    # --- relays (queued from the worker thread into the GUI thread) ---
    @Slot(object)
    def _relay_item(self, item: Any) -> None:
        self.items += 1
        if not self._stale:
            self.produced.emit(item)

    @Slot(str, str)
    def _relay_failed(self, message: str, details: str) -> None:
        self.error = (message, details)
        if not self._stale:
            self.failed.emit(message, details)

    @Slot()
    def _thread_finished(self) -> None:
        thread = self._thread
        if thread is not None:
            thread.wait()  # finished is emitted just before the thread really ends
        self.running = False
        self._worker = None
        self._thread = None  # dropping the last reference deletes the (finished) QThread safely
        if not self._stale:
            self.finished.emit()


class BackgroundRunner(QObject):
    """Starts tasks by kind ("train", "prepare", "generate" ...); at most one live task per kind."""

    task_started = Signal(str)
    task_finished = Signal(str)

    def __init__(self, parent: QObject | None = None):
        super().__init__(parent)
        self._tasks: dict[str, Task] = {}
        self._zombies: list[Task] = []  # replaced tasks whose threads are still ending

    def start(self, kind: str, factory: Callable[[], Iterable[Any]], controls: Controls | None = None) -> Task:
        old = self._tasks.get(kind)
        if old is not None and old.running:
            old.silence()
            old.cancel()
            self._zombies.append(old)
        task = Task(kind, controls, self)
        worker = _Worker(factory, task._cancelled)
        thread = QThread()
        thread.setObjectName(f"azr-{kind}")
        worker.moveToThread(thread)
        thread.started.connect(worker.run)
        worker.produced.connect(task._relay_item)
        worker.failed.connect(task._relay_failed)
        # Direct: quit must not wait for the GUI loop (the GUI may be blocked in wait() at shutdown).
        worker.done.connect(thread.quit, Qt.ConnectionType.DirectConnection)
        thread.finished.connect(task._thread_finished)
        task.finished.connect(lambda k=kind, t=task: self._on_finished(k, t))
        task._thread, task._worker = thread, worker
        self._tasks[kind] = task
        _LIVE_TASKS.add(task)
        thread.start()
        self.task_started.emit(kind)
        return task

    def _on_finished(self, kind: str, task: Task) -> None:
        self._zombies = [t for t in self._zombies if t.running]
        if self._tasks.get(kind) is task:
            self.task_finished.emit(kind)

    def task(self, kind: str) -> Task | None:
        return self._tasks.get(kind)

    def is_running(self, kind: str) -> bool:
        task = self._tasks.get(kind)
        return bool(task and task.running)

    def running_kinds(self) -> list[str]:
        return [k for k, t in self._tasks.items() if t.running]

    def stop(self, kind: str) -> None:
        task = self._tasks.get(kind)
        if task is not None and task.running:
            task.stop()

    def shutdown(self, timeout_ms: int = 60000) -> bool:
        """Stop every task gracefully and wait for the threads (no 'QThread destroyed while running')."""
        tasks = list(self._tasks.values()) + self._zombies
        for task in tasks:
            if task.running:
                task.stop()
        ok = True
        for task in tasks:
            ok = task.wait(timeout_ms) and ok
        for task in tasks:
            if not ok and task.running:
                task.cancel()
                ok = task.wait(timeout_ms) and ok
        return ok
