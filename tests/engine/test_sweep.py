"""A real sweep of tiny runs (engine/sweep/): it completes with its best trial ready to use, that trial's settings run
again give its value, pruning spends fewer steps and finds the same best trial, and a stopped sweep resumes its
unfinished trial from its checkpoint under the same number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sweep_cases import LR_RANGE, base_config, new_sweep, of_type, resume, run_to_end

from desktop_app.cli import main
from desktop_app.engine.events import Controls
from desktop_app.engine.session import start
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep_folder import read_best, read_trial, trial_dir
from desktop_app.engine.train.request import RunRequest

optuna = pytest.importorskip("optuna", reason="sweeps need the optional sweep extra: pip install -e .[sweep]")

TRIALS = 6  # random proposals of one seed: both sweeps below try the same learning rates, in the same order


@pytest.fixture(scope="module")
def sweeps(tmp_path_factory):
    """The same random sweep without and with the median pruner."""
    root = tmp_path_factory.mktemp("sweeps")
    config = base_config(root)
    out = {}
    for pruner in ("none", "median"):
        folder = root / pruner
        events = run_to_end(new_sweep(config, folder, vary=[LR_RANGE], trials=TRIALS, sampler="random", pruner=pruner))
        out[pruner] = (events, folder)
    return out


def test_a_sweep_of_tiny_runs_completes_with_its_best_trial_ready(sweeps):
    events, folder = sweeps["none"]
    finished = events[-1]
    assert finished.type == "finished" and finished.reason == "completed", finished
    ends = of_type(events, "trial_end")
    assert [e.number for e in ends] == list(range(TRIALS)) and {e.state for e in ends} == {"complete"}
    best = read_best(folder)
    winner = min(ends, key=lambda e: e.value)
    assert best["number"] == winner.number and best["value"] == winner.value == finished.result["best"]["value"]
    assert ends[-1].best_number == winner.number
    for end in ends:  # each trial is an ordinary run of its own, with the settings it tried, grouped under the sweep
        run = trial_dir(folder, end.number)
        assert RunConfig.load(run / "run.json").train["lr"] == end.params["train.lr"]
        assert read_trial(run)["trial"] == end.number and read_trial(run)["sweep"] == folder.name
    assert best["checkpoint"].startswith(best["run_dir"]) and Path(best["checkpoint"]).is_dir()
    # the run events of each trial came between its start and its verdict (a window shows the trial live)
    kinds = [e.type for e in events]
    assert kinds.index("trial_start") < kinds.index("step") < kinds.index("trial_end")
    assert "finished" not in kinds[:-1]


def test_the_best_trials_settings_run_again_give_its_value(sweeps, tmp_path):
    _events, folder = sweeps["none"]
    best = read_best(folder)
    config = RunConfig.load(best["run_config"])
    again = list(start(RunRequest(config=config.to_dict()), tmp_path / "again", Controls()))
    assert again[-1].reason == "completed"
    assert min(e.metrics["val_loss"] for e in again if e.type == "eval") == best["value"]


def test_pruning_spends_fewer_steps_and_finds_the_same_best_trial(sweeps):
    full, cut = (sweeps[p][0][-1].result for p in ("none", "median"))
    assert full["steps"] == TRIALS * 20 and cut["pruned"] >= 1
    assert cut["steps"] <= 0.85 * full["steps"], (cut["steps"], full["steps"])
    assert (cut["best"]["number"], cut["best"]["params"]) == (full["best"]["number"], full["best"]["params"])
    assert cut["best"]["value"] == full["best"]["value"]
    reports = [e for e in sweeps["median"][0] if e.type == "trial_report" and e.pruned]
    assert reports and min(r.step for r in reports) > 4  # one evaluation is too early to judge a trial


def test_a_stopped_sweep_resumes_its_unfinished_trial_from_its_checkpoint(tmp_path):
    config = base_config(tmp_path)
    controls = Controls()
    events = []
    for event in new_sweep(config, tmp_path / "sw", vary=[LR_RANGE], trials=3, pruner="none").events(controls):
        events.append(event)
        if event.type == "trial_report" and event.number == 1 and event.step == 8:
            controls.stop.set()
    assert events[-1].reason == "stopped" and "--resume" in events[-1].message
    assert of_type(events, "trial_end")[-1].state == "interrupted"
    storage = optuna.load_study(study_name="sweep", storage=f"sqlite:///{tmp_path / 'sw' / 'study.db'}")
    assert [t.state.name for t in storage.trials] == ["COMPLETE", "RUNNING"]
    again = resume(tmp_path / "sw")
    started = of_type(again, "trial_start")
    assert [(s.number, s.resumed) for s in started] == [(1, True), (2, False)]
    assert of_type(again, "start")[0].start_step == 8  # its run continued from the step-8 checkpoint
    assert again[-1].reason == "completed" and again[-1].result["complete"] == 3
    history = json.loads(json.dumps(storage.trials[1].intermediate_values))  # as it was when it was stopped
    storage = optuna.load_study(study_name="sweep", storage=f"sqlite:///{tmp_path / 'sw' / 'study.db'}")
    assert {int(k): v for k, v in history.items()}.items() <= storage.trials[1].intermediate_values.items()


def test_the_cli_prints_one_line_per_trial_and_the_best(tmp_path, capsys):
    base_config(tmp_path, steps=8).save(tmp_path / "run.json")
    code = main(["sweep", "--config", str(tmp_path / "run.json"), "--vary", "lr=1e-3..1e-2:log", "--vary",
                 "warmup_steps=0,2", "--trials", "2", "--pruner", "none", "--out", str(tmp_path / "sw")])
    err = capsys.readouterr().err
    assert code == 0, err
    assert "sweep of 2 trials in" in err and "judged by val_loss (lower is better), 1 at once" in err
    assert "trial 0: lr=" in err and "warmup_steps=" in err and "trial 1 complete: val_loss" in err
    assert err.strip().splitlines()[-1].startswith("completed: 2 trials (0 pruned, 0 failed), 16 steps in all; best")
