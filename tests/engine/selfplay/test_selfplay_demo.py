"""A shortened CPU demonstration: seed corpus -> pretrain (best checkpoint handed on) -> self-play as a real
"selfplay" run -> the control, each measured by the evaluation module on one held-out set."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.results import read_results
from desktop_app.engine.recipes.selfplay_demo import run_demo
from desktop_app.engine.specs import RunConfig

TYPES = ("deduction", "abduction", "induction")


@pytest.mark.slow
@pytest.mark.timeout(900)  # ~2.5 minutes on a quiet 2-core machine
def test_the_demo_plays_a_real_selfplay_run_and_measures_base_final_best_and_control(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    events = list(run_demo(out, minutes=60, corpus_tasks=2000, pretrain_steps=250, selfplay_steps=100,
                           eval_every=25, control=True, train_overrides={"precision": "fp32", "threads": 1},
                           eval_options={"per_type": 100}))
    finished = events[-1]
    assert finished.type == "finished" and finished.reason == "completed", finished
    result = finished.result
    assert finished.step == 100 == result["steps"]["selfplay"]  # the window shows "completed at step 100"
    for name in ("before", "final", "best", "control"):
        assert set(result[name]) == set(TYPES) and all(math.isfinite(v) for v in result[name].values()), name
    print({name: result[name] for name in ("before", "final", "best", "control")})
    mean = {name: sum(result[name].values()) / 3 for name in ("before", "final")}
    # the final self-play checkpoint solves at least one more of the 300 held-out tasks than the base did
    assert mean["final"] >= mean["before"] + 1 / 300, result
    # the phases are real runs with their methods: the window and the Library show self-play as self-play
    selfplay = RunConfig.load(out / "selfplay" / "run.json")
    assert selfplay.objective == "selfplay" and selfplay.method_options["world"] == "mini"
    # robust to its end: annealed to 0 over the phase, stopped when its own held-out rate stalls
    assert selfplay.train_spec().schedule == "cosine" and selfplay.train_spec().min_lr_ratio == 0.0
    assert selfplay.train_spec().early_stopping_patience > 0 and selfplay.train_spec().time_budget_s > 0
    assert selfplay.base_model.endswith(Path(result["pretrain_run"]).name + "/checkpoints/" +
                                        Path(selfplay.base_model).name)
    assert RunConfig.load(out / "control" / "run.json").objective == "causal_lm"
    # the pretraining ran on validation loss and handed on its best checkpoint; self-play started from it
    pretrain = RunConfig.load(out / "pretrain" / "run.json")
    assert pretrain.train_spec().early_stopping_patience > 0 and pretrain.train_spec().time_budget_s > 0
    evals = [e for e in events if e.type == "eval" and "heldout_solve_rate/deduction" in e.metrics]
    assert len(evals) == 4
    assert (out / "selfplay" / "selfplay.jsonl").exists()
    # the seed corpus holds the tasks asked for (and proposal examples), not the held-out sets' size
    splits = json.loads((out / "dataset" / "manifest.json").read_text())["splits"]
    assert splits["train"]["documents"] + splits["val"]["documents"] >= 2000
    # every measurement is kept in its run's evaluations file, on the same held-out set
    kept = read_results(out / "selfplay")
    assert kept and all(r["spec"]["heldout_seed"] == 9002 and r["metrics"]["tasks/deduction"] == 100 for r in kept)
    assert read_results(out / "pretrain") and read_results(out / "control")


def test_a_demo_refuses_a_used_folder_and_a_missing_base(tmp_path: Path) -> None:
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("keep me")
    with pytest.raises(UserError, match="not empty"):
        list(run_demo(tmp_path / "used", minutes=5))
    assert (tmp_path / "used" / "x").read_text() == "keep me"
    with pytest.raises(UserError, match="does not exist"):
        list(run_demo(tmp_path / "new", minutes=5, base=str(tmp_path / "no-model")))
    assert not (tmp_path / "new").exists()
