"""A run on 2 processes started by a front end (engine/train/launcher.py, torchrun, gloo, CPU): the same losses as
torchrun from a terminal on the same run.json and as one process at the same global batch; stop, pause and save
reach every process; a killed process is reported with its rank and the last good checkpoint.

Each torchrun launch costs a few seconds (two interpreters importing torch on two cores): three launches in all.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from train_helpers import make_dataset, metrics_losses, step_losses, tiny_config

from desktop_app.engine import run_folder as rf
from desktop_app.engine import session
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import CheckpointSaved, Controls, Finished, Log, RunFolder, StepMetrics
from desktop_app.engine.train import launcher
from desktop_app.engine.train.request import RunRequest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 6
DDP_TOLERANCE = 1e-5  # tests/engine/test_distributed.py's

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="torchrun on POSIX (signals, sessions)"),
              pytest.mark.timeout(600), pytest.mark.slow]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two processes on two cores: no oversubscription


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("launch") / "ds", n_docs=80)


def two_process_request(dataset: Path, **train: Any) -> RunRequest:
    config = tiny_config(dataset, model={"n_layers": 2}, **{"steps": STEPS, "batch_size": 8, **train})
    config = config.replace(distributed={"strategy": "ddp", "nproc_per_node": 2})
    return RunRequest(config=config.to_dict())


def alive(pids: list[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_two_processes_from_the_launcher_equal_a_terminal_torchrun_and_one_process(dataset, tmp_path, monkeypatch):
    run = tmp_path / "launched"
    events = list(session.start(two_process_request(dataset), run, Controls()))
    assert isinstance(events[0], RunFolder) and events[0].path == str(run)
    assert isinstance(events[-1], Finished) and events[-1].reason == "completed", events[-5:]
    launched = step_losses(events)
    assert sorted(launched) == list(range(1, STEPS + 1))  # each step once, as the one-process run yields them
    started = next(e for e in events if e.type == "start")
    assert started.world_size == 2 and started.strategy == "ddp"
    assert not [e for e in events if "OMP_NUM_THREADS" in str(getattr(e, "message", ""))]  # no torchrun banner
    # the same run.json from a terminal
    terminal = tmp_path / "terminal"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", "-m", "desktop_app",
           "train", "--config", str(run / "run.json"), "--out", str(terminal), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, env=launcher.child_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    by_terminal = metrics_losses(terminal)
    assert by_terminal.keys() == launched.keys()
    assert all(abs(by_terminal[k] - launched[k]) <= DDP_TOLERANCE for k in launched), (by_terminal, launched)
    # one process at the same global batch
    from desktop_app.engine.specs import RunConfig
    from desktop_app.engine.train.loop import train

    one = RunConfig.load(run / "run.json").replace(distributed={})
    alone = step_losses(list(train(one, tmp_path / "one", Controls())))
    assert all(abs(alone[k] - launched[k]) <= DDP_TOLERANCE for k in launched), (alone, launched)


def test_pause_and_stop_reach_both_processes_which_end_with_one_checkpoint(dataset, tmp_path):
    run, controls = tmp_path / "run", Controls()
    events, pids, paused_at, resumed_step = [], [], None, None
    for event in session.start(two_process_request(dataset, steps=4000), run, controls):
        events.append(event)
        if isinstance(event, StepMetrics) and event.step >= 3 and not pids:
            pids = list(launcher.worker_pids(rf.read_json(run / launcher.LAUNCH_FILE)["pid"]).values())
            controls.pause.set()
        elif isinstance(event, Log) and event.message.startswith("paused at step"):
            paused_at = int(event.message.split()[-1])
            time.sleep(1.0)
            controls.pause.clear()
        elif isinstance(event, StepMetrics) and paused_at is not None and resumed_step is None:
            resumed_step = event.step
            controls.stop.set()
    assert len(pids) == 2
    assert resumed_step == paused_at + 1  # no process trained while paused (they step together)
    finished = events[-1]
    assert isinstance(finished, Finished) and finished.reason == "stopped", events[-5:]
    assert not alive(pids)  # both processes ended
    saved = rf.list_committed(run)
    assert [rf.step_of(p) for p in saved] == [finished.step]
    rf.verify_checkpoint(saved[0])
    assert not [e for e in events if isinstance(e, launcher.ProcessFailed)]


def test_save_now_then_a_killed_process_is_reported_with_its_rank_and_the_last_checkpoint(dataset, tmp_path):
    run, controls = tmp_path / "run", Controls()
    events: list[Any] = []
    for event in session.start(two_process_request(dataset, steps=4000), run, controls):
        events.append(event)
        if isinstance(event, StepMetrics) and event.step == 3:
            controls.save_now.set()  # sent to process 0; both take part in the save
        elif isinstance(event, CheckpointSaved):
            torchrun = rf.read_json(run / launcher.LAUNCH_FILE)["pid"]
            os.kill(launcher.worker_pids(torchrun)[1], signal.SIGKILL)
    saved = [e for e in events if isinstance(e, CheckpointSaved)]
    assert len(saved) == 1 and 3 <= saved[0].step < 4000
    failed = [e for e in events if isinstance(e, launcher.ProcessFailed)]
    assert len(failed) == 1, events[-8:]
    assert failed[0].rank == 1 and failed[0].exit_code == -signal.SIGKILL
    assert Path(failed[0].checkpoint) == rf.latest_checkpoint(run) and rf.step_of(failed[0].checkpoint) == saved[0].step
    assert "process 1 ended (killed by SIGKILL)" in failed[0].message and "Resume" in failed[0].message
    assert isinstance(events[-1], Finished) and events[-1].reason == "failed"
    assert any(e.level == "error" for e in events if isinstance(e, Log))  # the processes' own words came through


def test_the_first_launch_prepares_the_sample_corpus_once_then_launches_on_it(dataset, tmp_path, monkeypatch):
    """The window's first run (no dataset chosen) on 2 processes: the corpus is prepared in the window's process,
    then the processes start on the prepared dataset (torchrun itself is stood in for here: the other tests run it)."""
    from desktop_app.engine.events import DatasetReady
    from desktop_app.engine.specs import DataSpec
    from desktop_app.engine.train.request import SampleCorpus

    texts = tmp_path / "texts"
    texts.mkdir()
    for i in range(6):
        (texts / f"doc{i}.txt").write_text(f"Document {i}. " + "The quick brown fox jumps over the lazy dog. " * 40)
    launched: list[Any] = []

    def fake_launch(config, run_dir, controls, *, poll_s=0.25):
        launched.append(config)
        yield Finished(reason="completed")

    monkeypatch.setattr(session, "launch_config", fake_launch)  # where the session calls it
    config = tiny_config(dataset, model={"n_layers": 2}, steps=STEPS, batch_size=8)
    request = RunRequest(model=config.model, train=config.train, distributed={"strategy": "ddp", "nproc_per_node": 2})
    request.sample = SampleCorpus([str(texts)], str(tmp_path / "sample-dataset"),
                                  DataSpec(tokenizer="byte-bpe", vocab_size=300, context_length=32))
    events = list(session.start(request, tmp_path / "run", Controls()))
    ready = [e for e in events if isinstance(e, DatasetReady)]
    assert len(ready) == 1 and (tmp_path / "sample-dataset" / "manifest.json").is_file()
    assert len(launched) == 1 and Path(launched[0].dataset) == tmp_path / "sample-dataset"
    assert launcher.processes_of(launched[0]) == 2


def test_a_run_that_cannot_be_launched_says_what_to_do(dataset, tmp_path):
    with pytest.raises(UserError, match=r"no run\.json"):
        list(launcher.resume_launch(tmp_path / "nothing", Controls(), nproc=2))
    assert not (tmp_path / "nothing").exists()  # nothing was created


def test_units_processes_exit_words_and_the_command():
    from desktop_app.engine.run_commands import torchrun_command
    from desktop_app.engine.specs import RunConfig

    assert launcher.processes_of(RunConfig()) == 1
    assert launcher.processes_of(RunConfig(distributed={"nproc_per_node": 3})) == 3
    assert launcher.processes_of(RunConfig(distributed={"strategy": "fsdp"})) == 1  # the spec's default
    assert launcher.exit_words(-9) == "killed by SIGKILL" and launcher.exit_words(1) == "exit code 1"
    argv = launcher.torchrun_argv(Path("/r"), 2)
    shown = torchrun_command(RunConfig(distributed={"nproc_per_node": 2}), "/r/run.json", "/r").splitlines()[1]
    # the command the window shows, run with this Python's torchrun
    assert " ".join(argv[3:]).replace("--nproc_per_node=2", "--nproc_per_node 2") == shown.removeprefix("torchrun ")
    assert launcher.log_level("[process 1] Traceback") == "error" and launcher.log_level("hello") == "info"
    failed = launcher.dead_process(["Failures:", "[1]:", "  rank      : 1 (local_rank: 1)",
                                    "  exitcode  : -9 (pid: 12)  (SIGKILL)", "Root Cause (first observed failure):",
                                    "[0]:",
                                    "  rank      : 0 (local_rank: 0)", "  exitcode  : 1 (pid: 11)"], 1,
                                   Path("/nonexistent"))
    assert (failed.rank, failed.exit_code, failed.checkpoint) == (1, -9, "")
    assert "no checkpoint was saved yet" in failed.message
    # process 0 ending with 1 after losing contact is the consequence; torchrun's SIGTERM to survivors too
    assert launcher.culprit(["rank : 0", "exitcode : -15", "rank : 1", "exitcode : 3"]) == (1, 3)
    assert launcher.culprit(["nothing useful"]) == (-1, None)
