"""One way to start a run: the window, the CLI and the server hand the same request to the engine
(engine/train/request.py) and get the same run.json; no front end fits a model or assembles a RunConfig itself."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

from fastapi.testclient import TestClient

from desktop_app.engine.presets import preset
from desktop_app.engine.specs import TrainSpec

ROOT = Path(__file__).resolve().parents[2] / "desktop_app"
FRONT_ENDS = ("ui", "cli", "server")
TRAIN = {"steps": 2, "batch_size": 4, "eval_every": 0, "save_every": 0, "threads": 1}  # each has a CLI flag


def _flags(train: dict) -> list[str]:
    from desktop_app.engine.run_commands import TRAIN_FLAGS

    assert set(train) <= set(TRAIN_FLAGS), train  # the CLI can say all of it
    return [arg for key, value in train.items() for arg in (TRAIN_FLAGS[key], str(value))]


def _window_run(window, qtbot, dataset: Path) -> dict:
    tab = window.train_tab
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(dataset))
    window.model_tab.set_spec(preset("tiny"))
    for key, value in TRAIN.items():
        tab.setup.form.set_value(key, value)
    assert tab.start(), window.ctx.errors
    qtbot.waitUntil(lambda: not tab.running, timeout=120000)
    assert tab.run_view.last_finished.reason == "completed", tab.run_view.last_finished
    return json.loads((tab.run_dir / "run.json").read_text())


def _cli_run(dataset: Path, out: Path, train: dict) -> dict:
    from desktop_app.cli import main

    assert main(["train", "--dataset", str(dataset), "--preset", "tiny", *_flags(train), "--out", str(out)]) == 0
    return json.loads((out / "run.json").read_text())


def _server_run(workspace, train: dict) -> dict:
    from desktop_app.server.app import create_app
    from desktop_app.server.state import ServerSettings

    with TestClient(create_app(ServerSettings(), workspace, None)) as client:
        started = client.post("/api/runs", json={"dataset": "tiny-data", "preset": "tiny", "train": train})
        assert started.status_code == 201, started.text
        run_id = started.json()["id"]
        deadline = time.monotonic() + 120
        while client.get(f"/api/runs/{run_id}").json()["state"] not in ("completed", "failed", "stopped"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        assert client.get(f"/api/runs/{run_id}").json()["state"] == "completed"
        return json.loads((Path(started.json()["path"]) / "run.json").read_text())


def test_the_same_request_makes_the_same_run_in_window_cli_and_server(window, qtbot, populated_workspace, tmp_path):
    dataset = (populated_workspace.folder("datasets") / "tiny-data").resolve()
    from_window = _window_run(window, qtbot, dataset)
    # What the window's form holds beyond TrainSpec's defaults is what the other two are asked for.
    defaults = TrainSpec().to_dict()
    train = {k: v for k, v in from_window["train"].items() if v != defaults[k]}
    assert {"steps", "batch_size"} <= set(train)
    from_cli = _cli_run(dataset, tmp_path / "cli-run", train)
    from_server = _server_run(populated_workspace, train)
    assert from_window == from_cli == from_server
    assert from_window["model"]["vocab_size"] == 320 and from_window["model"]["context_length"] == 32  # fitted
    assert from_window["model"]["vocab_size"] != preset("tiny").vocab_size


def _calls(package: str, names: set[str]) -> list[str]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
                if name in names and (node.args or node.keywords):  # RunConfig(): reading its defaults
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return found


def test_no_front_end_fits_a_model_or_assembles_a_run_config() -> None:
    """The engine decides: front ends translate their inputs into a RunRequest (or load a run.json to resume)."""
    offenders = [hit for package in FRONT_ENDS
                 for hit in _calls(package, {"RunConfig", "adapt_model_to_dataset", "fit_to_dataset",
                                             "config_from_preset"})]
    assert not offenders, offenders
