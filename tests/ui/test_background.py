"""The generic worker: items re-emitted as signals, errors readable, cancel, stale tasks, shutdown."""

from __future__ import annotations

import threading
import time

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.ui.background import BackgroundRunner, live_tasks


def _count(n):
    yield from range(n)


def test_items_arrive_in_order(qtbot):
    runner = BackgroundRunner()
    got = []
    task = runner.start("t", lambda: _count(50))
    task.produced.connect(got.append)
    qtbot.waitUntil(lambda: not task.running, timeout=10000)
    assert got == list(range(50))
    assert not live_tasks()


def test_many_signals_do_not_crash(qtbot):
    """Regression guard for PySide6 6.12.0 on Python < 3.12 (a reference dropped per emit -> abort)."""
    runner = BackgroundRunner()
    got = []
    task = runner.start("many", lambda: ({"i": i, "ok": True} for i in range(5000)))
    task.produced.connect(lambda item: got.append(item["i"]))
    qtbot.waitUntil(lambda: not task.running, timeout=30000)
    assert len(got) == 5000 and got[-1] == 4999


def test_user_error_is_shown_as_is_and_crash_has_details(qtbot):
    runner = BackgroundRunner()

    def bad_user():
        yield 1
        raise UserError("the file x.txt is empty")

    def crash():
        yield 1
        raise ZeroDivisionError("boom")

    errors = []
    t1 = runner.start("a", bad_user)
    t1.failed.connect(lambda m, d: errors.append((m, d)))
    t2 = runner.start("b", crash)
    t2.failed.connect(lambda m, d: errors.append((m, d)))
    qtbot.waitUntil(lambda: not t1.running and not t2.running, timeout=10000)
    assert ("the file x.txt is empty", "") in errors
    crash_err = next(e for e in errors if "boom" in e[0])
    assert crash_err[0] == "ZeroDivisionError: boom" and "Traceback" in crash_err[1]


def test_cancel_is_a_direct_call_while_the_worker_loops(qtbot):
    runner = BackgroundRunner()
    closed = threading.Event()

    def forever(controls):
        try:
            while not controls.stop.is_set():
                time.sleep(0.005)
                yield "tick"
        finally:
            closed.set()

    controls = Controls()
    task = runner.start("loop", lambda: forever(controls), controls)
    qtbot.waitUntil(lambda: task.items > 3, timeout=10000)
    task.stop()
    qtbot.waitUntil(lambda: not task.running, timeout=10000)
    assert closed.is_set()


def test_new_task_of_a_kind_cancels_and_silences_the_old(qtbot):
    runner = BackgroundRunner()
    controls = Controls()

    def slow(tag, ctl):
        while not ctl.stop.is_set():
            time.sleep(0.005)
            yield tag

    old_items, new_items = [], []
    old = runner.start("gen", lambda: slow("old", controls), controls)
    old.produced.connect(old_items.append)
    qtbot.waitUntil(lambda: old.items > 0, timeout=10000)
    new = runner.start("gen", lambda: iter(["new"] * 3))
    new.produced.connect(new_items.append)
    count_at_switch = len(old_items)
    qtbot.waitUntil(lambda: not old.running and not new.running, timeout=10000)
    assert controls.stop.is_set()
    assert old.stale and len(old_items) == count_at_switch  # nothing from the stale task after the switch
    assert new_items == ["new"] * 3
    assert runner.task("gen") is new


def test_shutdown_waits_for_threads(qtbot):
    runner = BackgroundRunner()
    controls = Controls()

    def slow():
        while not controls.stop.is_set():
            time.sleep(0.01)
            yield 0

    task = runner.start("x", slow, controls)
    qtbot.waitUntil(lambda: task.items > 0, timeout=10000)
    assert runner.shutdown(10000)
    assert not live_tasks()
    qtbot.waitUntil(lambda: not task.running, timeout=5000)


def test_factory_error_is_reported(qtbot):
    runner = BackgroundRunner()

    def factory():
        raise UserError("no such dataset")

    errors = []
    task = runner.start("f", factory)
    task.failed.connect(lambda m, d: errors.append(m))
    qtbot.waitUntil(lambda: not task.running, timeout=10000)
    assert errors == ["no such dataset"]
