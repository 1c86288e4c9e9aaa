"""Standard benchmarks in-process (lm-evaluation-harness on the model the app loaded): the same scores as the
harness's own HFLM, the eval record's keys, the CLI's table and JSON, stop, and one-line errors. Offline: the tasks
are tests/fixtures/benchmark_tasks (the harness's YAML over local JSON files)."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from train_helpers import make_dataset, tiny_config

from desktop_app.engine.evaluate import benchmarks
from desktop_app.engine.evaluate.results import read_results
from desktop_app.engine.evaluate.runner import evaluate_models
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.events import Controls
from desktop_app.engine.train.loop import train

TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "benchmark_tasks"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("benchruns")
    dataset = make_dataset(root / "ds", context=64)
    list(train(tiny_config(dataset, steps=2, save_every=2), root / "a"))
    list(train(tiny_config(dataset, steps=4, save_every=4, seed=2), root / "b"))
    return root / "a", root / "b"


@pytest.mark.parametrize("fewshot", [0, 2])
def test_scores_equal_the_harness_own_hflm(runs, fewshot: int) -> None:
    """Every log-likelihood and every greedy generation equals HFLM's on the same model, tasks and settings."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    from desktop_app.engine.evaluate.benchmark_lm import AppLM, Tracker
    from desktop_app.engine.model.loading import load_model

    loaded = load_model(str(runs[0]))

    def evaluate(lm):
        manager, tasks, _ = benchmarks.load_benchmark_tasks(["azr_tiny"], str(TASKS))
        return lm_eval.simple_evaluate(model=lm, tasks=tasks, task_manager=manager, num_fewshot=fewshot)

    reported = []
    ours = evaluate(AppLM(loaded.model, loaded.tokenizer, batch=8, generation_batch=4,
                          tracker=Tracker(threading.Event(), reported.append)))
    theirs = evaluate(HFLM(pretrained=loaded.model, tokenizer=loaded.tokenizer, batch_size=8))
    for task, items in (("azr_tiny_mc", 20), ("azr_tiny_gen", 10)):
        mine = [s["resps"] for s in ours["samples"][task]]
        assert len(mine) == items and mine == [s["resps"] for s in theirs["samples"][task]]
    assert benchmarks.benchmark_metrics(ours) == benchmarks.benchmark_metrics(theirs)
    assert reported[-1].done == reported[-1].total == 10  # the generation requests, all done


def test_eval_record_holds_the_harness_figures(runs, run_cli) -> None:
    code, out, err = run_cli(runs[0], "--benchmark", "azr_tiny", "--benchmark-dir", TASKS, "--limit", "5",
                             "--fewshot", "1", "--json")
    assert code == 0, err
    row = json.loads(out.strip())
    for task, metric in (("azr_tiny_mc", "acc"), ("azr_tiny_mc", "acc_norm"), ("azr_tiny_gen", "exact_match"),
                         ("azr_tiny", "acc")):
        assert 0.0 <= row[f"bench/{task}/{metric}"] <= 1.0
        assert isinstance(row[f"bench/{task}/{metric}/stderr"], float)
    assert row["bench/azr_tiny_mc/items"] == 5 and row["bench/azr_tiny_gen/items"] == 5
    assert row["bench/azr_tiny_mc/fewshot"] == 1 and row["benchmark_harness"].startswith("lm_eval ")
    kept = read_results(runs[0])[-1]
    assert kept["metrics"]["bench/azr_tiny_mc/acc"] == row["bench/azr_tiny_mc/acc"]
    assert kept["spec"]["benchmarks"] == ["azr_tiny"] and kept["spec"]["benchmark_limit"] == 5


def test_table_shows_value_and_stderr_and_the_difference(runs, run_cli) -> None:
    a, b = runs
    code, out, err = run_cli(a, b, "--benchmark", "azr_tiny_mc", "--benchmark-dir", TASKS, "--limit", "6",
                             "--no-save")
    assert code == 0, err
    header, first, second, delta = out.strip().splitlines()
    assert "bench/azr_tiny_mc/acc" in header.split() and "/stderr" not in header
    assert " ± " in first and " ± " in second
    assert delta.strip().startswith(f"Δ vs {a.name}")
    code, out, _ = run_cli(a, b, "--benchmark", "azr_tiny_mc", "--benchmark-dir", TASKS, "--limit", "6",
                           "--no-save", "--json")
    rows = [json.loads(line) for line in out.splitlines()]
    assert "compared_with" not in rows[0] and rows[1]["compared_with"] == str(a)
    diff = rows[1]["difference"]["bench/azr_tiny_mc/acc"]
    assert diff == pytest.approx(rows[1]["bench/azr_tiny_mc/acc"] - rows[0]["bench/azr_tiny_mc/acc"])


@pytest.mark.parametrize(("argv", "words"), [
    (["--benchmark", "azr_tiny_mcq"], "azr_tiny_mc"),  # unknown: the close name offered
    (["--limit", "3"], "--benchmark"),
])
def test_bad_benchmark_arguments_one_line_exit_2(runs, run_cli, argv, words) -> None:
    code, out, err = run_cli(runs[0], *argv, "--benchmark-dir", TASKS) if "--benchmark" in argv else \
        run_cli(runs[0], *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err
    assert read_results(runs[0]) == [] or all("bench/" not in str(r["metrics"]) or r["spec"]["benchmark_limit"] != 3
                                              for r in read_results(runs[0]))


def test_missing_data_and_missing_harness_one_line(runs, run_cli, tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "gone.yaml").write_text((TASKS / "azr_tiny_mc.yaml").read_text().replace("task: azr_tiny_mc",
                                                                                       "task: gone_task"))
    before = len(read_results(runs[0]))
    code, _, err = run_cli(runs[0], "--benchmark", "gone_task", "--benchmark-dir", folder)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "gone_task" in err
    monkeypatch.setattr(benchmarks, "harness_missing", lambda: "install the extra, pip install x")
    code, _, err = run_cli(runs[0], "--benchmark", "azr_tiny_mc", "--benchmark-dir", TASKS)
    assert code == 2 and err.strip().endswith("install the extra, pip install x")
    assert len(read_results(runs[0])) == before  # nothing measured, nothing written


def test_stop_during_benchmarks_ends_cleanly(runs) -> None:
    spec = EvalSpec(benchmarks=["azr_tiny_mc"], benchmark_dir=str(TASKS), batch=2)
    controls = Controls()
    seen = []
    for event in evaluate_models([str(runs[0])], spec, controls, save=False):
        seen.append(event)
        if event.type == "progress" and event.stage == "benchmarks" and event.done >= 2:
            controls.stop.set()
    assert seen[-1].type == "finished" and seen[-1].reason == "stopped"
    assert not any(e.type == "model_evaluated" for e in seen)
    assert not any(t.name == "benchmarks" for t in threading.enumerate())  # the worker ended
