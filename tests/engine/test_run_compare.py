"""Runs compared side by side (engine/run_compare.py): curves per metric, final and best figures by the metric's
direction, the run.json differences with a label per run, and a clear error for what cannot be compared."""

from __future__ import annotations

import json

import pytest
from compare_runs import write_run

from desktop_app.engine.errors import UserError
from desktop_app.engine.run_compare import better_of, compare_runs, config_of, number_text, value_text


@pytest.fixture
def two_runs(tmp_path):
    return (write_run(tmp_path / "runs" / "fast", lr=3e-3), write_run(tmp_path / "runs" / "slow", lr=3e-4))


def test_two_runs_give_curves_figures_and_what_differs(two_runs):
    fast, slow = two_runs
    result = compare_runs([fast, slow])
    assert [m.name for m in result.metrics][:2] == ["loss", "val_loss"]  # the losses first
    assert {m.name for m in result.metrics} == {"loss", "val_loss", "lr", "tokens_per_s"}
    loss = result.metric("loss")
    assert loss.better == "min" and [c.steps for c in loss.curves] == [[1, 2, 3, 4, 5, 6]] * 2
    assert loss.curves[0].final() == (6, pytest.approx(5.0 - 0.3 * 6))
    assert loss.curves[1].best("min") == (6, pytest.approx(5.0 - 0.03 * 6))
    assert result.metric("val_loss").curves[0].steps == [3, 6]
    assert result.metric("tokens_per_s").curves[0].best("max") == (6, 1006.0)
    assert result.metric("lr").better == "" and result.metric("lr").curves[0].best("") is None
    assert result.metric("loss").leader("final") == 0 and result.metric("val_loss").leader("best") == 0
    assert result.metric("tokens_per_s").leader("final") is None  # the same figure in both: no leader
    # only the learning rate and the run's own folder name... the dataset is the same one
    assert result.differences == {"train.lr": [3e-3, 3e-4]}
    assert [r.label for r in result.runs] == ["lr=0.003", "lr=3e-4"]
    assert result.runs[1].legend == "lr=3e-4 (slow)" and result.runs[0].name == "fast"


def test_best_is_the_lowest_loss_not_the_last(tmp_path):
    bumpy = write_run(tmp_path / "bumpy", lr=1e-3, losses=[4.0, 2.0, 3.0, 2.5])
    other = write_run(tmp_path / "other", lr=1e-3, seed=2, losses=[4.0, 3.5, 3.0, 2.9])
    loss = compare_runs([bumpy, other]).metric("loss")
    figures = loss.to_dict()["runs"]
    assert (figures[0]["final"], figures[0]["best"], figures[0]["best_step"]) == (2.5, 2.0, 2)
    assert (figures[1]["final"], figures[1]["best"]) == (2.9, 2.9)
    assert figures[0]["steps"] == [1, 2, 3, 4] and figures[0]["values"] == [4.0, 2.0, 3.0, 2.5]


def test_a_setting_left_unset_equals_its_default(two_runs, tmp_path):
    """A run.json that leaves a setting out (an older or hand-written one) agrees with one that states the default."""
    fast, _slow = two_runs
    sparse = write_run(tmp_path / "runs" / "sparse", lr=3e-3)
    config = json.loads((sparse / "run.json").read_text(encoding="utf-8"))
    del config["train"]["weight_decay"], config["adapter"]
    (sparse / "run.json").write_text(json.dumps(config), encoding="utf-8")
    assert config_of(sparse)["train.weight_decay"] == config_of(fast)["train.weight_decay"]
    result = compare_runs([fast, sparse])
    assert result.differences == {} and [r.label for r in result.runs] == ["fast", "sparse"]  # nothing differs


def test_several_differences_name_a_few_and_count_the_rest(tmp_path):
    a = write_run(tmp_path / "a", lr=1e-3, steps=6, seed=1)
    b = write_run(tmp_path / "b", lr=2e-3, steps=9, seed=2)
    result = compare_runs([a, b])
    assert result.metric("loss").leader("final") == 1 and result.metric("lr").leader("best") is None
    assert set(result.differences) == {"train.steps", "train.lr", "seed"}
    assert result.runs[0].label == "lr=0.001, steps=6, seed=1"  # the learning rate first: what people vary most
    assert result.runs[1].label == "lr=0.002, steps=9, seed=2"


def test_one_metric_only_and_an_unknown_metric(two_runs):
    result = compare_runs(list(two_runs), metric="val_loss")
    assert [m.name for m in result.metrics] == ["val_loss"]
    with pytest.raises(UserError, match="no run reported the metric 'accuracy'; the runs have: loss, val_loss"):
        compare_runs(list(two_runs), metric="accuracy")


@pytest.mark.parametrize("case", ["one", "same twice", "missing", "a file", "not a run", "no metrics",
                                  "folder of runs"])
def test_what_cannot_be_compared_is_a_clear_error(two_runs, tmp_path, case):
    fast, slow = two_runs
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    (tmp_path / "plain").mkdir()
    empty = write_run(tmp_path / "empty", lr=1e-3)
    (empty / "metrics.jsonl").write_text('{"type": "start"}\n{"type": "step", "step": 1, "loss"', encoding="utf-8")
    paths, words = {
        "one": ([fast], "give two runs or more"),
        "same twice": ([fast, slow, fast], "is given twice: give different runs"),
        "missing": ([fast, tmp_path / "nope"], "does not exist: give a run folder"),
        "a file": ([fast, tmp_path / "notes.txt"], "is a file, not a run"),
        "not a run": ([fast, tmp_path / "plain"], "is not a training run"),
        "no metrics": ([fast, empty], "has no training metrics yet"),
        "folder of runs": ([fast, tmp_path / "runs"], "holds several runs: give one of them (fast, slow)"),
    }[case]
    before = {p: p.read_bytes() for p in [*fast.iterdir(), *slow.iterdir()]}
    with pytest.raises(UserError, match=words.replace("(", r"\(").replace(")", r"\)")):
        compare_runs(paths)
    assert {p: p.read_bytes() for p in before} == before  # nothing written


def test_which_way_is_better_by_name():
    assert [better_of(n) for n in ("loss", "val_loss", "val_ppl", "val_bpb", "format_errors", "rewards_rejected")] \
        == ["min"] * 6
    assert [better_of(n) for n in ("reward", "reward/solver/deduction", "preference_accuracy", "val_acc",
                                   "heldout_solve_rate/induction", "tokens_per_s", "mfu")] == ["max"] * 7
    assert [better_of(n) for n in ("lr", "grad_norm", "kl", "entropy", "response_length")] == [""] * 5


def test_values_in_a_few_characters():
    assert [number_text(v) for v in (3e-4, 0.003, 1.5, 1006.4, 34141.7, 2e6, 0.0)] == \
        ["3e-4", "0.003", "1.5", "1006", "34142", "2e6", "0"]
    assert [value_text(v) for v in (None, "", True, "/data/sets/tiny", 3e-4, [1, 2])] == \
        ["—", "—", "true", "tiny", "3e-4", "[1, 2]"]
