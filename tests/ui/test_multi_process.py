"""A run on 2 processes started from the window (Distributed: Processes per machine 2; torchrun, gloo, CPU): curves
appear, Stop ends both processes with one checkpoint, a killed process is named with the last good checkpoint and a
Resume button, and closing the window can leave the processes running for Library -> Watch live."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from ui_helpers import TINY

from desktop_app.engine import run_folder as rf
from desktop_app.engine.train import launcher

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="torchrun on POSIX (signals, sessions)"),
              pytest.mark.timeout(300), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def start_two_processes(window, workspace, **train) -> None:
    tab = window.train_tab
    window.model_tab.set_spec(TINY)
    tab.setup.set_method("pretraining")
    tab.setup.select_dataset(str(workspace.folder("datasets") / "tiny-data"))
    spec = tab.setup.form.spec().replace(**{"steps": 4000, "batch_size": 4, "eval_every": 0, "save_every": 0,
                                            "sample_tokens": 0, "threads": 1, "warmup_steps": 1, **train})
    tab.setup.form.set_spec(spec)
    tab.setup.dist_form.set_value("nproc_per_node", 2)  # off its default (1): the run starts on 2 processes
    assert tab.start(), window.ctx.errors
    assert tab.multi.active


def workers(tab) -> dict[int, int]:
    pid = rf.read_json(tab.run_dir / launcher.LAUNCH_FILE)["pid"]
    return launcher.worker_pids(pid)


def gone(pids) -> bool:
    return all(not psutil.pid_exists(p) or psutil.Process(p).status() == psutil.STATUS_ZOMBIE for p in pids)


def test_two_processes_from_the_window_curves_then_stop(window, qtbot, populated_workspace):
    tab = window.train_tab
    start_two_processes(window, populated_workspace)
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") >= 3, timeout=120_000)
    pids = list(workers(tab).values())
    assert len(pids) == 2
    assert tab.stop_btn.isEnabled()
    tab.stop_btn.click()
    qtbot.waitUntil(lambda: not tab.running, timeout=120_000)
    assert gone(pids)
    last = tab.run_view.last_finished
    assert last is not None and last.reason == "stopped", window.ctx.errors
    saved = rf.list_committed(tab.run_dir)
    assert [rf.step_of(p) for p in saved] == [last.step]  # one checkpoint, at the step it stopped
    assert not tab.multi.bar.isVisibleTo(tab) and not window.ctx.errors


def test_a_killed_process_is_named_with_resume(window, qtbot, populated_workspace):
    tab = window.train_tab
    start_two_processes(window, populated_workspace, save_every=2)
    qtbot.waitUntil(lambda: bool(rf.list_committed(tab.run_dir)), timeout=120_000)
    os.kill(workers(tab)[1], signal.SIGKILL)
    qtbot.waitUntil(lambda: not tab.running, timeout=120_000)
    assert tab.multi.bar.isVisibleTo(tab)
    text = tab.multi.label.text()
    last = rf.latest_checkpoint(tab.run_dir)
    assert "process 1 ended (killed by SIGKILL)" in text and str(last) in text
    assert tab.multi.resume_btn.isVisibleTo(tab)
    assert window.ctx.errors  # the run's end was reported as a failure
    # Resume continues the run on 2 processes from that checkpoint; closing the window then leaves it running
    tab.multi.resume_btn.click()
    assert tab.running and tab.multi.active and not tab.multi.bar.isVisibleTo(tab)
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") > rf.step_of(last), timeout=120_000)
    pids = list(workers(tab).values())
    tab.multi.close_answer = "leave"
    window.close()
    qtbot.waitUntil(lambda: not tab.running, timeout=30_000)
    assert not gone(pids) and launcher.stop_launched(tab.run_dir)  # still training, then stopped from outside
    qtbot.waitUntil(lambda: gone(pids), timeout=120_000)
