"""`runs compare`: a readable table of final and best figures with the settings that differ, one JSON object with
--json, and one clear line (exit 2) for what cannot be compared."""

from __future__ import annotations

import json

import pytest
from compare_runs import write_run

from desktop_app.cli import main


@pytest.fixture
def two_runs(tmp_path):
    return (write_run(tmp_path / "fast", lr=3e-3, losses=[4.0, 2.0, 3.0, 2.5]),
            write_run(tmp_path / "slow", lr=3e-4, losses=[4.0, 3.9, 3.8, 3.7]))


def test_the_table_names_each_run_by_what_differs_and_gives_final_and_best(two_runs, capsys):
    fast, slow = two_runs
    assert main(["runs", "compare", str(fast), str(slow)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].split() == ["1.", "fast", "lr=0.003", str(fast)]
    assert lines[2].split() == ["2.", "slow", "lr=3e-4", str(slow)]
    loss_final = next(line for line in lines if line.startswith("loss "))
    assert loss_final.split() == ["loss", "final", "2.5", "(step", "4)", "3.7", "(step", "4)"]
    best = lines[lines.index(loss_final) + 1]
    assert best.split() == ["best", "(lowest)", "2", "(step", "2)", "3.7", "(step", "4)"]
    lr_row = next(line for line in lines if line.startswith("lr "))
    assert "best" not in lines[lines.index(lr_row) + 1]  # a learning rate has no best
    assert [line.split() for line in lines if line.startswith("train.lr")] == [["train.lr", "0.003", "3e-4"]]


def test_json_is_one_object_with_runs_differences_and_metrics(two_runs, capsys):
    fast, slow = two_runs
    assert main(["runs", "compare", str(fast), str(slow), "--json", "--metric", "loss"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1
    data = json.loads(out)
    assert [r["label"] for r in data["runs"]] == ["lr=0.003", "lr=3e-4"]
    assert data["differences"] == [{"key": "train.lr", "values": [3e-3, 3e-4]}]
    (loss,) = data["metrics"]
    assert loss["name"] == "loss" and loss["better"] == "min"
    assert [(r["final"], r["best"], r["best_step"]) for r in loss["runs"]] == [(2.5, 2.0, 2), (3.7, 3.7, 4)]
    assert loss["runs"][0]["values"] == [4.0, 2.0, 3.0, 2.5]


def test_runs_with_the_same_settings_say_so(tmp_path, capsys):
    a, b = write_run(tmp_path / "a", lr=1e-3), write_run(tmp_path / "b", lr=1e-3)
    assert main(["runs", "compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "(same settings)" in out and "run.json: every setting is the same in these runs" in out


@pytest.mark.parametrize("case", ["one run", "not a run", "unknown metric"])
def test_what_cannot_be_compared_is_one_clear_line(two_runs, tmp_path, capsys, case):
    fast, slow = two_runs
    (tmp_path / "plain").mkdir()
    argv, words = {
        "one run": ([str(fast)], "error: give two runs or more to compare"),
        "not a run": ([str(fast), str(tmp_path / "plain")], f"error: {tmp_path / 'plain'} is not a training run"),
        "unknown metric": ([str(fast), str(slow), "--metric", "reward"], "error: no run reported the metric 'reward'"),
    }[case]
    assert main(["runs", "compare", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith(words) and len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err
