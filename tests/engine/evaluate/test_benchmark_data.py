"""Benchmark data (issue 40): the harness's datasets are fetched by an explicit choice through the app's network switch,
with the progress of model downloads, cached, and read offline afterwards; missing data is one sentence.

Against tests/hub_server.py serving a dataset repository (never the internet). Skips without lm_eval / datasets.
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("datasets")

from hub_datasets import TINY_ARC, tiny_arc_files, use_datasets_library, write_tiny_arc_tasks

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate import benchmark_catalog as catalog
from desktop_app.engine.evaluate.benchmark_data import (
    BenchmarkDataFetched,
    BenchmarkDataMissing,
    check_benchmark_data,
    data_state,
    datasets_offline,
    datasets_online,
    fetch_benchmark_data,
)
from desktop_app.engine.events import Controls, Progress
from desktop_app.engine.hub.download import DownloadCancelled, DownloadProgress
from desktop_app.engine.hub.errors import NetworkOff

FIXTURE_TASKS = Path(__file__).resolve().parents[2] / "fixtures" / "benchmark_tasks"


@pytest.fixture
def dataset_hub(hub_server, tmp_path, monkeypatch):
    """The local Hub with the tiny_arc dataset repository, the datasets library pointed at it with an empty cache,
    and a folder of task YAMLs over it. Yields (server, task folder as str)."""
    use_datasets_library(hub_server, tmp_path / "datasets-cache", monkeypatch)
    hub_server.add_dataset(TINY_ARC, tiny_arc_files())
    return hub_server, str(write_tiny_arc_tasks(tmp_path / "tasks"))


def test_fetch_reports_download_progress_then_the_task_loads_offline_with_no_request(dataset_hub):
    server, folder = dataset_hub
    assert data_state(["tiny_arc_easy", "tiny_arc"], folder) == {"tiny_arc_easy": "missing", "tiny_arc": "missing"}
    events = list(fetch_benchmark_data(["tiny_arc_easy"], folder))
    progress = [e for e in events if isinstance(e, DownloadProgress)]
    size = len(tiny_arc_files()["Easy/test.jsonl"])
    assert progress and progress[-1].done == progress[-1].total == size
    assert progress[-1].repo_id == f"{TINY_ARC} (Easy)" and progress[-1].file == "Easy/test.jsonl"
    assert any(isinstance(e, Progress) and e.stage == "preparing benchmark data" for e in events)
    assert events[-1] == BenchmarkDataFetched(["tiny_arc_easy"], [f"{TINY_ARC} (Easy)"], size)
    assert server.fetched("Hard/test.jsonl") == 0  # only the config the task reads
    assert data_state(["tiny_arc_easy", "tiny_arc_hard", "tiny_arc"], folder) == {
        "tiny_arc_easy": "ready", "tiny_arc_hard": "missing", "tiny_arc": "missing"}
    check_benchmark_data(["tiny_arc_easy"], folder)

    before = len(server.settled())
    from lm_eval.tasks import TaskManager

    with datasets_offline():
        tasks = TaskManager(include_path=folder, include_defaults=False).load(["tiny_arc_easy"])["tasks"]
        task = tasks["tiny_arc_easy"]
        docs = list(task.test_docs())
    assert [d["question"] for d in docs] == [f"what is {i} plus 0?" for i in range(8)]
    assert len(server.settled()) == before  # offline: the cache, never the network


def test_fetching_again_fetches_nothing(dataset_hub):
    server, folder = dataset_hub
    list(fetch_benchmark_data(["tiny_arc"], folder))
    requests = len(server.settled())
    fetched = server.fetched()
    assert list(fetch_benchmark_data(["tiny_arc"], folder)) == [BenchmarkDataFetched(["tiny_arc"])]
    assert (len(server.settled()), server.fetched()) == (requests, fetched)


def test_a_full_evaluation_by_the_harness_runs_offline_after_the_fetch(dataset_hub, hub_repos, tmp_path):
    """The harness's own evaluation (HFLM on a tiny model) reads the fetched data with the network closed."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager
    from transformers import AutoModelForCausalLM, AutoTokenizer

    server, folder = dataset_hub
    list(fetch_benchmark_data(["tiny_arc"], folder))
    model_dir = tmp_path / "tiny-chat"
    model_dir.mkdir()
    chat = next(r for r in hub_repos if r.repo_id == "tiny-org/tiny-chat")
    for name, data in chat.files.items():
        (model_dir / name).write_bytes(data)
    lm = HFLM(pretrained=AutoModelForCausalLM.from_pretrained(model_dir),
              tokenizer=AutoTokenizer.from_pretrained(model_dir), batch_size=4, device="cpu")
    server.stop()  # nothing may reach it now
    with datasets_offline():
        check_benchmark_data(["tiny_arc"], folder)
        manager = TaskManager(include_path=folder, include_defaults=False)
        results = simple_evaluate(lm, tasks=["tiny_arc"], task_manager=manager, limit=4, log_samples=False)
    for task in ("tiny_arc_easy", "tiny_arc_hard"):
        assert 0.0 <= results["results"][task]["acc,none"] <= 1.0
    assert results["n-samples"]["tiny_arc_easy"]["effective"] == 4


def test_missing_data_offline_is_one_sentence_naming_what_to_fetch_and_how(dataset_hub):
    server, folder = dataset_hub
    with pytest.raises(BenchmarkDataMissing) as caught:
        check_benchmark_data(["tiny_arc"], folder)
    message = str(caught.value)
    assert "\n" not in message and message.count(". ") == 0
    assert message.startswith("the data of tiny_arc is not on this computer yet: fetch it first")
    assert f" benchmarks fetch tiny_arc --dir {folder}`" in message and "Fetch data (Library → Evaluate…" in message
    assert server.requests == []  # checking never asks the network


def test_network_off_refuses_before_any_request_and_fetches_nothing(dataset_hub, monkeypatch):
    server, folder = dataset_hub
    monkeypatch.setenv("AZR_NETWORK", "off")
    with pytest.raises(NetworkOff, match="network features are off"):
        list(fetch_benchmark_data(["tiny_arc_easy"], folder))
    assert server.requests == []
    assert data_state(["tiny_arc_easy"], folder) == {"tiny_arc_easy": "missing"}


def test_cancel_stops_the_fetch_and_fetching_again_completes(dataset_hub):
    server, folder = dataset_hub
    server.add_dataset(TINY_ARC, tiny_arc_files(items=40, pad=20_000))  # ~800 kB a config
    server.slow(1_500_000)
    controls = Controls()
    events = []
    for event in fetch_benchmark_data(["tiny_arc_easy"], folder, controls):
        events.append(event)
        if isinstance(event, DownloadProgress) and event.done > 0:
            controls.stop.set()
    assert isinstance(events[-1], DownloadCancelled) and events[-1].done < events[-1].total
    assert not any(isinstance(e, BenchmarkDataFetched) for e in events)
    assert data_state(["tiny_arc_easy"], folder) == {"tiny_arc_easy": "missing"}
    server.slow(0)
    assert isinstance(list(fetch_benchmark_data(["tiny_arc_easy"], folder))[-1], BenchmarkDataFetched)
    assert data_state(["tiny_arc_easy"], folder) == {"tiny_arc_easy": "ready"}


def test_a_dataset_the_hub_does_not_have_is_one_sentence(dataset_hub):
    _, folder = dataset_hub
    yaml = Path(folder, "tiny_arc_easy.yaml")
    yaml.write_text(yaml.read_text().replace(TINY_ARC, "tiny-org/no_such_data"))
    catalog.task_index.cache_clear()
    with pytest.raises(UserError) as caught:
        list(fetch_benchmark_data(["tiny_arc_easy"], folder))
    assert "tiny-org/no_such_data" in str(caught.value) and "\n" not in str(caught.value)


def test_unknown_names_and_a_missing_task_folder_are_one_sentence(dataset_hub, tmp_path):
    _, folder = dataset_hub
    with pytest.raises(catalog.UnknownBenchmark, match="no benchmark named tiny_arc_eazy: did you mean "
                       "tiny_arc_easy"):
        check_benchmark_data(["tiny_arc_eazy"], folder)
    assert data_state(["tiny_arc_eazy"], folder) == {"tiny_arc_eazy": "unknown"}
    with pytest.raises(UserError, match=r"task folder .* does not exist"):
        check_benchmark_data(["tiny_arc_easy"], str(tmp_path / "nowhere"))
    with pytest.raises(UserError, match="no benchmark named: give one or more names"):
        check_benchmark_data([" "], folder)


def test_local_task_files_count_as_present_and_a_lost_file_is_named(tmp_path, monkeypatch):
    assert data_state(["azr_tiny_mc", "azr_tiny"], str(FIXTURE_TASKS)) == {"azr_tiny_mc": "local",
                                                                           "azr_tiny": "local"}
    check_benchmark_data(["azr_tiny"], str(FIXTURE_TASKS))
    folder = tmp_path / "tasks"
    shutil.copytree(FIXTURE_TASKS, folder)
    (folder / "azr_tiny_gen_test.jsonl").unlink()
    assert data_state(["azr_tiny_mc", "azr_tiny_gen", "azr_tiny"], str(folder)) == {
        "azr_tiny_mc": "local", "azr_tiny_gen": "missing", "azr_tiny": "missing"}
    monkeypatch.setenv("AZR_NETWORK", "off")  # nothing to fetch: the refusal comes first, without the network
    for attempt in (lambda: check_benchmark_data(["azr_tiny"], str(folder)),
                    lambda: list(fetch_benchmark_data(["azr_tiny_gen"], str(folder)))):
        with pytest.raises(BenchmarkDataMissing) as caught:
            attempt()
        assert str(folder / "azr_tiny_gen_test.jsonl") in str(caught.value)
        assert "put them back" in str(caught.value) and "\n" not in str(caught.value)
    assert (folder / "azr_tiny_mc_test.jsonl").is_file()  # nothing else touched


def test_datasets_offline_switches_datasets_only_and_restores_it():
    import datasets.config as ds_config
    from huggingface_hub import constants

    before = (constants.HF_HUB_OFFLINE, ds_config.HF_HUB_OFFLINE, ds_config.HF_DATASETS_OFFLINE)
    with datasets_offline():
        assert ds_config.HF_HUB_OFFLINE is True and ds_config.HF_DATASETS_OFFLINE is True
        assert before[0] == constants.HF_HUB_OFFLINE  # huggingface_hub's own switch is the model downloads'
    assert before == (constants.HF_HUB_OFFLINE, ds_config.HF_HUB_OFFLINE, ds_config.HF_DATASETS_OFFLINE)
    errors = []

    def nested() -> None:
        try:
            with datasets_offline():
                assert ds_config.HF_HUB_OFFLINE is True
        except AssertionError as exc:
            errors.append(exc)

    thread = threading.Thread(target=nested)
    thread.start()
    thread.join()
    assert errors == [] and before == (constants.HF_HUB_OFFLINE, ds_config.HF_HUB_OFFLINE,
                                       ds_config.HF_DATASETS_OFFLINE)


def test_an_evaluation_beside_a_download_and_a_fetch_leaves_every_switch_as_it_was(monkeypatch):
    """An evaluation that overlaps a model download and a benchmark fetch (ending in any order) never blocks the
    download, lets the fetch reach the network while it runs, and leaves no wrong value behind."""
    import datasets.config as ds_config
    from huggingface_hub import constants

    from desktop_app.engine.hub.network import online

    monkeypatch.delenv("AZR_NETWORK", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)  # an offline-first launch
    monkeypatch.setattr(ds_config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(ds_config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(ds_config, "HF_ENDPOINT", "https://huggingface.co")
    evaluation, download, fetch = datasets_offline(), online(), datasets_online("http://127.0.0.1:9")
    evaluation.__enter__()
    download.__enter__()
    assert constants.HF_HUB_OFFLINE is False and ds_config.HF_HUB_OFFLINE is True  # the download runs
    fetch.__enter__()
    assert ds_config.HF_HUB_OFFLINE is False and ds_config.HF_ENDPOINT == "http://127.0.0.1:9"
    evaluation.__exit__(None, None, None)  # the evaluation ends first
    assert ds_config.HF_HUB_OFFLINE is False  # the fetch still runs
    download.__exit__(None, None, None)
    assert constants.HF_HUB_OFFLINE is True
    fetch.__exit__(None, None, None)
    assert (ds_config.HF_HUB_OFFLINE, ds_config.HF_DATASETS_OFFLINE) == (True, True)
    assert ds_config.HF_ENDPOINT == "https://huggingface.co"
    with datasets_online("http://127.0.0.1:9"), datasets_offline():  # a fetch started first still wins
        assert ds_config.HF_HUB_OFFLINE is False
        with datasets_offline():
            assert ds_config.HF_HUB_OFFLINE is False
    assert ds_config.HF_HUB_OFFLINE is True and ds_config.HF_ENDPOINT == "https://huggingface.co"


def test_the_catalog_knows_the_popular_benchmarks_and_their_hub_datasets():
    names = set(catalog.task_names())
    popular = catalog.popular_benchmarks()
    assert {b.name for b in popular} <= names
    assert all(b.description and "\n" not in b.description for b in popular)
    (arc,) = catalog.task_datasets(["arc_easy"])
    assert (arc.path, arc.name, arc.tasks, arc.local) == ("allenai/ai2_arc", "ARC-Easy", ["arc_easy"], False)
    mmlu = catalog.task_datasets(["mmlu"])
    assert len(mmlu) == 57 and {r.path for r in mmlu} == {"cais/mmlu"}
    assert "azr_tiny_mc" in catalog.folder_tasks(str(FIXTURE_TASKS))
    assert "azr_tiny_mc" not in catalog.task_names()
