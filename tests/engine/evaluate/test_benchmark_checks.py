"""A benchmark's data is checked before any model loads (issue 51): a stock task whose data is not here yet is one
sentence saying how to fetch it, from the runner and the `eval` verb, and no model is loaded for it; a dataset the
Hub does not offer is told in the person's words (their own task file, or the harness's task: nothing they set).

Runs without lm-evaluation-harness: the catalog's answers (the names, each task's datasets) and the cache's state
are stood in for; the checks, the sentences and the runner's order are the app's own."""

from __future__ import annotations

import pytest
from patching import patch_everywhere

from desktop_app.engine.evaluate import benchmark_catalog, benchmark_data, benchmarks, runner
from desktop_app.engine.evaluate.benchmark_catalog import DatasetRef
from desktop_app.engine.evaluate.benchmark_data import BenchmarkDataMissing, fetch_error
from desktop_app.engine.evaluate.runner import evaluate_models
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.paths import cli_exe

HUB_DATASETS = {"hellaswag": "Rowan/hellaswag", "arc_easy": "allenai/ai2_arc"}


class ModelLoaded(Exception):
    """Raised by the stand-in loader: a model was about to load."""


@pytest.fixture
def stock_tasks(monkeypatch):
    """hellaswag and arc_easy as the harness knows them; `ready`: the names whose data is in the cache (none at
    first); `loads`: every model the runner tried to load (the loader refuses, so nothing is measured)."""
    ready: set[str] = set()
    loads: list[str] = []
    monkeypatch.setattr(benchmarks, "harness_missing", lambda: None)
    patch_everywhere(monkeypatch, benchmark_catalog, "check_names", lambda names, _dir="": list(names))
    patch_everywhere(monkeypatch, benchmark_catalog, "task_datasets",
                     lambda names, _dir="": [DatasetRef(HUB_DATASETS[n], None, [n]) for n in names])
    monkeypatch.setattr(benchmark_data, "dataset_ready",
                        lambda ref: any(HUB_DATASETS[n] == ref.path for n in ready))

    def load(path, **_kw):
        loads.append(path)
        raise ModelLoaded(path)

    monkeypatch.setattr(runner, "load_model", load)
    return ready, loads


def test_missing_data_is_one_sentence_before_any_model_loads(stock_tasks):
    ready, loads = stock_tasks
    ready.add("arc_easy")
    spec = EvalSpec(world="none", benchmarks=["arc_easy", "hellaswag"])
    with pytest.raises(BenchmarkDataMissing) as caught:
        list(evaluate_models(["some-model"], spec))
    message = str(caught.value)
    assert loads == []  # the missing data is told before the model loads
    assert message.startswith("the data of hellaswag is not on this computer yet: fetch it first with Fetch data")
    assert f"`{cli_exe()} benchmarks fetch hellaswag`" in message and "Library → Evaluate…" in message
    assert "arc_easy" not in message and "dataset_path" not in message and "\n" not in message
    assert caught.value.names == ["hellaswag"]


def test_with_the_data_here_the_model_loads(stock_tasks):
    ready, loads = stock_tasks
    ready.update(HUB_DATASETS)
    with pytest.raises(ModelLoaded):
        list(evaluate_models(["some-model"], EvalSpec(world="none", benchmarks=["arc_easy", "hellaswag"])))
    assert loads == ["some-model"]


def test_eval_verb_says_the_same_one_line_and_exits_2(stock_tasks, run_cli, tmp_path):
    _, loads = stock_tasks
    model = tmp_path / "some-model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "llama"}')
    code, out, err = run_cli(model, "--benchmark", "hellaswag")
    assert code == 2 and out == "" and loads == []
    assert len(err.strip().splitlines()) == 1
    assert "the data of hellaswag is not on this computer yet" in err and "benchmarks fetch hellaswag" in err


class DatasetNotFoundError(Exception):
    """As the datasets library names it (the check goes by the name: the library is optional)."""


def test_a_dataset_the_hub_lacks_is_said_in_the_persons_words(tmp_path):
    stock = DatasetRef("Rowan/hellaswag", None, ["hellaswag"])
    said = str(fetch_error(DatasetNotFoundError("Dataset 'Rowan/hellaswag' doesn't exist on the Hub"), [stock]))
    assert said.startswith("the data of hellaswag cannot be fetched")
    assert "dataset_path" not in said and "lm-evaluation-harness's own task" in said and "nothing you set" in said
    own_file = str(tmp_path / "my_task.yaml")
    own = DatasetRef("me/my_data", None, ["my_task"], task_file=own_file)
    said = str(fetch_error(DatasetNotFoundError("Dataset 'me/my_data' doesn't exist on the Hub"), [own]))
    assert "dataset_path" in said and own_file in said and "\n" not in said


def test_own_file_tells_the_persons_tasks_from_the_harnesss(tmp_path):
    folder = tmp_path / "tasks"
    folder.mkdir()
    assert benchmark_catalog.own_file(folder / "mine.yaml", folder.resolve()) == str((folder / "mine.yaml").resolve())
    assert benchmark_catalog.own_file(tmp_path / "lm_eval" / "hellaswag.yaml", folder.resolve()) == ""
    assert benchmark_catalog.own_file(folder / "mine.yaml", None) == ""
