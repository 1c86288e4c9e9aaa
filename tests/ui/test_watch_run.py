"""Watching a run launched outside the window (CLI, torchrun): its metrics.jsonl, appended by another thread here,
feeds the Train tab's plots live; a resume's cut-back file is replayed; "finished" ends the watch; Stop watching
and starting a training end it too; nothing is written to the run; the Library's Watch live names the run; Stop the
run stops the processes the window launched (RUN/launch.json), and only those.
Also the Distributed fields and the torchrun command of Show CLI command."""

from __future__ import annotations

import json
import os
import threading
import time

from desktop_app.engine.events import Finished, StepMetrics
from desktop_app.engine.specs import RunConfig, TrainSpec


def _line(step: int, kind: str = "step", **extra) -> str:
    return json.dumps({"type": kind, "step": step, **extra}) + "\n"


def _step(step: int, total: int = 20) -> str:
    return _line(step, total_steps=total, loss=3.0 / step, lr=1e-3)


def _run_folder(tmp_path, steps: int = 3):
    run = tmp_path / "outside-run"
    run.mkdir()
    RunConfig(objective="dpo", base_model="/some/base", data=["/some/pairs.jsonl"]).save(run / "run.json")
    (run / "metrics.jsonl").write_text("".join(_step(s) for s in range(1, steps + 1)), encoding="utf-8")
    return run


def _snapshot(run) -> dict:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in run.iterdir()}


def _wait_idle(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=10000)


def test_watching_follows_appended_records_until_finished(window, qtbot, tmp_path):
    tab = window.train_tab
    run = _run_folder(tmp_path)
    before = _snapshot(run)
    assert tab.watch_run(run)
    assert tab.watching and tab.run_view.watch_bar.isVisibleTo(tab)
    label = tab.run_view.watch_label.text()
    assert "Watching outside-run" in label and "launched outside the window" in label
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") == 3, timeout=10000)
    assert "preference_accuracy" in tab.run_view.plots.panel_keys()  # the run's method (run.json) picks the panels
    assert _snapshot(run) == before  # read-only

    appended = threading.Event()

    def writer() -> None:  # the other process: appends a record at a time, one of them torn across two writes
        with open(run / "metrics.jsonl", "a", encoding="utf-8") as fh:
            for step in range(4, 12):
                text = _step(step)
                fh.write(text[:7])
                fh.flush()
                time.sleep(0.05)
                fh.write(text[7:])
                fh.flush()
                time.sleep(0.1)
            appended.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    counts = []
    qtbot.waitUntil(lambda: counts.append(tab.run_view.plots.point_count("loss")) or counts[-1] == 11, timeout=10000)
    thread.join(5)
    assert appended.is_set() and len(set(counts)) > 2  # it grew while the writer wrote, not all at once
    assert tab.watching and "watching: step 11/20" in tab.run_view.progress.format()

    # a resume of the run cuts metrics.jsonl back to its checkpoint: the watch replays it from the start
    keep = len("".join(_step(s) for s in range(1, 6)).encode())
    with open(run / "metrics.jsonl", "r+b") as fh:
        fh.truncate(keep)
    with open(run / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(_step(6) + _line(6, "finished", reason="completed", message="trained 6 steps"))
    qtbot.waitUntil(lambda: not tab.watching, timeout=10000)  # finished ends the watch
    _wait_idle(qtbot, window)
    assert tab.run_view.plots.point_count("loss") == 6
    assert not tab.run_view.watch_bar.isVisibleTo(tab)
    assert tab.run_view.last_finished.reason == "completed"
    assert "watched run completed at step 6" in tab.run_view.progress.format()
    log = tab.run_view.log_view.toPlainText()
    assert "cut back" in log and "the watched run finished: completed" in log
    assert set(_snapshot(run)) == {"run.json", "metrics.jsonl"}


def test_stop_watching_and_starting_a_training_end_the_watch(window, qtbot, tmp_path, populated_workspace,
                                                             monkeypatch):
    tab = window.train_tab
    run = _run_folder(tmp_path)
    assert tab.watch_run(run)
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") == 3, timeout=10000)
    tab.run_view.stop_watch_btn.click()
    assert not tab.watching and not tab.run_view.watch_bar.isVisibleTo(tab)
    _wait_idle(qtbot, window)  # the follower's thread ended

    from desktop_app.ui import train_jobs

    def quick_job(session, controls):
        session.run_dir.mkdir(parents=True, exist_ok=True)
        yield StepMetrics(step=1, total_steps=1, metrics={"loss": 9.0})
        yield Finished("completed", step=1)

    monkeypatch.setattr(train_jobs, "session_job", quick_job)
    assert tab.watch_run(run)
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") == 3, timeout=10000)
    tab.setup.set_method("pretraining")
    tab.setup.select_dataset(str(populated_workspace.folder("datasets") / "tiny-data"))
    assert tab.start(), window.ctx.errors
    assert not tab.watching and not tab.run_view.watch_bar.isVisibleTo(tab)  # watching stopped first
    qtbot.waitUntil(lambda: not tab.running, timeout=10000)
    _wait_idle(qtbot, window)
    assert tab.run_view.plots.point_count("loss") == 1  # the plots are the training's, nothing of the watched run
    assert tab.watch_run(run) and tab.watching  # the training ended: watching is allowed again
    tab.stop_watching()
    _wait_idle(qtbot, window)


def test_library_watch_live_names_the_run(window, qtbot, workspace):
    run = workspace.folder("runs") / "cli-run"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text(_step(1) + _step(2), encoding="utf-8")
    library = window.library_tab
    window.ctx.workspace_items_changed.emit()
    assert library.select(str(run))
    assert library.watch_btn.isEnabled()
    assert "live" in library.details.toPlainText()
    with qtbot.waitSignal(library.watch_requested, timeout=1000) as got:
        library.watch_btn.click()
    assert got.args == [str(run)]
    tab = window.train_tab
    assert window.tabs.currentWidget() is tab and tab.watching  # the main window routes it to the Train tab
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") == 2, timeout=10000)
    tab.stop_watching()
    _wait_idle(qtbot, window)


def test_distributed_fields_and_the_torchrun_command(window, qtbot):
    tab = window.train_tab
    tab.setup.set_method("lora")
    # one process on this machine: torchrun's fields wait under Advanced (shown by themselves with several GPUs)
    assert not tab.setup.dist_group.isVisibleTo(tab)
    tab.setup.set_gpu_count(2)
    assert tab.setup.dist_group.isVisibleTo(tab)
    tab.setup.set_gpu_count(0)
    tab.setup.advanced_check.setChecked(True)
    assert tab.setup.dist_group.isVisibleTo(tab)
    assert all(w.toolTip() for w in tab.setup.dist_form.editors.values())  # help text from DistributedSpec
    assert tab.setup.build_config().distributed == {}  # defaults: run.json as the CLI writes it
    tab.setup.dist_form.set_value("strategy", "fsdp")
    tab.setup.dist_form.set_value("nproc_per_node", 4)
    tab.setup.dist_form.set_value("fsdp_cpu_offload", True)
    config = tab.setup.build_config()
    assert config.distributed == {"strategy": "fsdp", "nproc_per_node": 4, "fsdp_cpu_offload": True}
    assert config.distributed_spec().strategy == "fsdp"
    assert "distributed.strategy=fsdp" in tab.cli_command()  # no flag for it: named, in run.json
    tab.show_cli_command()
    text = tab.cli_dialog.findChild(object, "cliCommand").toPlainText()
    tab.cli_dialog.close()
    assert "torchrun --standalone --nproc_per_node 4 -m desktop_app train --config run.json --out my-run --json" in text
    assert ("torchrun --nnodes M --node_rank R --rdzv_backend c10d --rdzv_endpoint HOST:PORT --nproc_per_node 4 "
            "-m desktop_app train --config run.json --out my-run") in text
    # back into the form from a run config (resume, Library)
    tab.setup.dist_form.set_spec(type(tab.setup.dist_form.spec())())
    tab.setup.apply_config(RunConfig(objective="sft", base_model="/b", data=["/d.jsonl"], train=TrainSpec().to_dict(),
                               distributed={"strategy": "fsdp", "nproc_per_node": 8}))
    assert tab.setup.dist_form.spec().nproc_per_node == 8
    assert tab.setup.build_config().distributed["nproc_per_node"] == 8
    tab.setup.set_method("pipeline")
    assert not tab.setup.dist_group.isVisibleTo(tab)
    tab.setup.set_method("pretraining")
    _wait_idle(qtbot, window)


def test_watching_a_pipeline_follows_the_stage_it_is_at(window, qtbot, tmp_path):
    tab = window.train_tab
    out = tmp_path / "cli-pipeline"
    out.mkdir()
    (out / "pipeline.json").write_text(json.dumps({"stages": []}), encoding="utf-8")
    assert not tab.watch_run(out) and "No stage of the pipeline cli-pipeline has started" in window.ctx.errors[-1][0]
    stage = out / "stages" / "02-dpo"
    stage.mkdir(parents=True)
    (stage / "metrics.jsonl").write_text(_step(1) + _step(2) + _step(3), encoding="utf-8")
    state = {"current": 1, "stages": [{"name": "sft", "run_dir": str(out / "stages" / "01-sft"), "status": "completed"},
                                      {"name": "dpo", "run_dir": str(stage), "status": "running"}]}
    (out / "pipeline_state.json").write_text(json.dumps(state), encoding="utf-8")
    assert tab.watch_run(out)
    assert tab.watched_dir == stage and "stage 2 'dpo'" in tab.run_view.log_view.toPlainText()
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") == 3, timeout=10000)
    tab.stop_watching()
    _wait_idle(qtbot, window)


# a stand-in for torchrun (its cmdline names torch.distributed.run): on SIGTERM it "saves" and writes finished
_FAKE_TORCHRUN = """
import json, signal, sys, time
run = sys.argv[1]
def stop(*_):
    with open(run + "/metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "finished", "step": 3, "reason": "stopped"}) + "\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print("ready", flush=True)
time.sleep(60)
"""


def test_stop_the_run_stops_the_processes_the_window_launched(window, qtbot, tmp_path):
    import subprocess
    import sys

    tab = window.train_tab
    run = _run_folder(tmp_path)
    assert tab.watch_run(run)  # no launch.json: a CLI run, whose processes the window does not own
    assert not tab.run_view.stop_run_btn.isVisibleTo(tab)
    tab.stop_watching()
    (run / "launch.json").write_text(json.dumps({"pid": os.getpid(), "nproc": 2}), encoding="utf-8")
    assert tab.watch_run(run)  # a pid that is not a torchrun (reused by another program) is never signalled
    assert not tab.run_view.stop_run_btn.isVisibleTo(tab)
    tab.stop_watching()
    _wait_idle(qtbot, window)

    proc = subprocess.Popen([sys.executable, "-c", _FAKE_TORCHRUN, str(run), "torch.distributed.run"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        (run / "launch.json").write_text(json.dumps({"pid": proc.pid, "nproc": 2}), encoding="utf-8")
        assert tab.watch_run(run)
        assert tab.run_view.stop_run_btn.isVisibleTo(tab) and tab.run_view.stop_run_btn.isEnabled()
        assert "left running by the window" in tab.run_view.watch_label.text()
        asked = []
        window.ctx.confirm = lambda title, text, parent=None: asked.append(text) or False
        tab.run_view.stop_run_btn.click()  # "No": nothing is sent
        assert asked and proc.poll() is None and tab.watching
        window.ctx.confirm = lambda title, text, parent=None: True
        tab.run_view.stop_run_btn.click()
        assert proc.wait(10) == 0 and not tab.run_view.stop_run_btn.isEnabled()
        qtbot.waitUntil(lambda: not tab.watching, timeout=10000)  # its finished record ends the watch
        _wait_idle(qtbot, window)
        assert tab.run_view.last_finished.reason == "stopped"
        assert "asked the processes of outside-run to stop" in tab.run_view.log_view.toPlainText()
        assert tab.watch_run(run) and not tab.run_view.stop_run_btn.isVisibleTo(tab)  # its torchrun has ended
        tab.stop_watching()
        _wait_idle(qtbot, window)
    finally:
        proc.kill()
        proc.wait()
