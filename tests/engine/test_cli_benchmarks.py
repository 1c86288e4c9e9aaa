"""`benchmarks list` / `benchmarks fetch` (issue 40): the engine's catalog and fetch, printed; mistakes in one line,
exit 2. Against tests/hub_server.py (never the internet); skips without lm_eval / datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")
pytest.importorskip("datasets")

from hub_datasets import TINY_ARC, tiny_arc_files, use_datasets_library, write_tiny_arc_tasks

from desktop_app.cli import main

FIXTURE_TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "benchmark_tasks"


@pytest.fixture
def dataset_hub(hub_server, tmp_path, monkeypatch):
    use_datasets_library(hub_server, tmp_path / "datasets-cache", monkeypatch)
    hub_server.add_dataset(TINY_ARC, tiny_arc_files())
    return hub_server, str(write_tiny_arc_tasks(tmp_path / "tasks"))


def test_fetch_prints_progress_then_ready_and_list_shows_it(dataset_hub, capsys):
    _, folder = dataset_hub
    assert main(["benchmarks", "list", "--dir", folder, "--json"]) == 0
    rows = {r["name"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert rows["tiny_arc"]["data"] == "not fetched" and rows["mmlu"]["description"].startswith("57 school")
    assert main(["benchmarks", "fetch", "tiny_arc_easy", "--dir", folder]) == 0
    out, err = capsys.readouterr()
    assert f"{TINY_ARC} (Easy)" in err and "preparing" in err
    assert out.startswith(f"tiny_arc_easy: data ready (fetched {TINY_ARC} (Easy))")
    assert main(["benchmarks", "list", "--dir", folder]) == 0
    out = capsys.readouterr().out
    assert any(line.split()[:3] == ["tiny_arc_easy", "fetched"] for line in out.splitlines())
    assert any(line.split()[:3] == ["tiny_arc_hard", "not", "fetched"] for line in out.splitlines())


def test_fetch_json_prints_the_engines_events(dataset_hub, capsys):
    _, folder = dataset_hub
    assert main(["benchmarks", "fetch", "tiny_arc", "--dir", folder, "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"download", "progress"} <= {e["type"] for e in events}
    assert events[-1]["type"] == "benchmark_data_fetched" and len(events[-1]["datasets"]) == 2


@pytest.mark.parametrize(("argv", "says"), [
    (["fetch", "tiny_arc_eazy"], "no benchmark named tiny_arc_eazy: did you mean tiny_arc_easy?"),
    (["fetch", ","], "no benchmark named: give one or more names"),
    (["list", "--dir", "/no/such/folder"], "the benchmark task folder /no/such/folder does not exist"),
])
def test_mistakes_are_one_line_and_exit_2(dataset_hub, capsys, argv, says):
    _, folder = dataset_hub
    extra = ["--dir", folder] if "--dir" not in argv else []
    assert main(["benchmarks", *argv, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
    assert dataset_hub[0].requests == []


def test_network_off_is_one_line_and_no_request(dataset_hub, capsys, monkeypatch):
    server, folder = dataset_hub
    monkeypatch.setenv("AZR_NETWORK", "off")
    assert main(["benchmarks", "fetch", "tiny_arc", "--dir", folder]) == 2
    err = capsys.readouterr().err.strip()
    assert "network features are off" in err and len(err.splitlines()) == 1
    assert server.requests == []


def test_list_shows_a_folders_local_tasks(capsys):
    assert main(["benchmarks", "list", "--dir", str(FIXTURE_TASKS)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:3] == ["azr_tiny_mc", "local", "files"] for line in lines)
