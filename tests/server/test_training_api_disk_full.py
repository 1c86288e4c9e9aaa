"""A run started through the training API whose checkpoint the disk refuses pauses ("save_blocked", with the one
line) instead of ending; POST .../retry once space is back saves it and the run completes; retry on a run that is not
blocked is a clear 409."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import httpx
from disk_faults import FullDisk
from server_helpers import running_server

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from train_helpers import make_dataset

from desktop_app.engine import run_folder as rf


def _wait_for(client: httpx.Client, run_id: str, states: set[str], timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get(f"/api/runs/{run_id}").json()
        if status["state"] in states:
            return status
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} never reached {states}: {status}")


def test_a_full_disk_pauses_an_api_run_until_retry(tmp_path, monkeypatch):
    disk = FullDisk(monkeypatch, from_step=1)
    dataset = make_dataset(tmp_path / "ds")
    with running_server(tmp_path / "ws") as (url, state), httpx.Client(base_url=url, timeout=60) as client:
        shutil.copytree(dataset, state.workspace.folder("datasets") / "ds")
        created = client.post("/api/runs", json={"dataset": "ds", "preset": "tiny",
                                                 "train": {"steps": 4, "batch_size": 2, "threads": 1}})
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        blocked = _wait_for(client, run_id, {"save_blocked", "failed", "completed"})
        assert blocked["state"] == "save_blocked", blocked
        assert "the disk is full" in blocked["message"] and "bug" not in blocked["message"]
        run_dir = Path(blocked["path"])
        assert rf.list_committed(run_dir) == []
        disk.free()
        retried = client.post(f"/api/runs/{run_id}/retry")
        assert retried.status_code == 200 and retried.json()["state"] == "running"
        done = _wait_for(client, run_id, {"completed", "failed", "stopped"})
        assert done["state"] == "completed" and done["step"] == 4
        assert [rf.step_of(p) for p in rf.list_committed(run_dir)] == [4]
        again = client.post(f"/api/runs/{run_id}/retry")
        assert again.status_code == 409
