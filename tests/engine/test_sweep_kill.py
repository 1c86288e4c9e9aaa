"""kill -9 of a real `python -m desktop_app sweep` in the middle of a trial, then resume: no trial lost, none run twice,
the study's history intact, and the interrupted trial's value the one an uninterrupted run of its settings gives."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from sweep_cases import base_config, of_type, resume

from desktop_app.engine.events import Controls
from desktop_app.engine.session import start
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep_folder import trial_dir
from desktop_app.engine.train.request import RunRequest

optuna = pytest.importorskip("optuna", reason="sweeps need the optional sweep extra: pip install -e .[sweep]")
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX kill -9")
ROOT = Path(__file__).resolve().parents[2]
TRIALS = 3


def _study(folder: Path):
    return optuna.load_study(study_name="sweep", storage=f"sqlite:///{folder / 'study.db'}")


def test_kill_9_mid_trial_then_resume_loses_no_trial_and_runs_none_twice(tmp_path):
    config = base_config(tmp_path)
    config.save(tmp_path / "run.json")
    folder = tmp_path / "sweep"
    argv = [sys.executable, "-m", "desktop_app", "sweep", "--config", str(tmp_path / "run.json"), "--vary",
            "lr=1e-3..3e-2:log", "--trials", str(TRIALS), "--pruner", "none", "--out", str(folder), "--json"]
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    seen = []
    try:
        for line in proc.stdout:
            seen.append(json.loads(line))
            if seen[-1]["type"] == "trial_report" and seen[-1]["number"] == 1 and seen[-1]["step"] == 12:
                break  # trial 0 told, trial 1 past its step-8 checkpoint: killed in the middle of it
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert seen and seen[-1]["type"] == "trial_report", seen[-5:]
    before = _study(folder).trials
    assert [t.state.name for t in before] == ["COMPLETE", "RUNNING"]

    events = resume(folder)
    assert events[-1].type == "finished" and events[-1].reason == "completed", events[-1]
    started = of_type(events, "trial_start")
    assert [(s.number, s.resumed) for s in started] == [(1, True), (2, False)]  # 0 is not run again; 1 continues
    assert of_type(events, "start")[0].start_step == 8  # from its newest checkpoint, not from step 0
    after = _study(folder).trials
    assert [t.number for t in after] == list(range(TRIALS)) and {t.state.name for t in after} == {"COMPLETE"}
    assert (after[0].params, after[0].value, after[0].intermediate_values) == \
        (before[0].params, before[0].value, before[0].intermediate_values)
    assert after[1].params == before[1].params
    assert before[1].intermediate_values.items() <= after[1].intermediate_values.items()
    assert sorted(after[1].intermediate_values) == [4, 8, 12, 16, 20]
    assert sorted(p.name for p in (folder / "trials").iterdir()) == [f"trial-{n:04d}" for n in range(TRIALS)]
    # the killed trial's value is what its settings give in one uninterrupted run
    config = RunConfig.load(trial_dir(folder, 1) / "run.json")
    again = list(start(RunRequest(config=config.to_dict()), tmp_path / "again", Controls()))
    assert min(e.metrics["val_loss"] for e in again if e.type == "eval") == after[1].value
