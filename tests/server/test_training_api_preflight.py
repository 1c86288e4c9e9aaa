"""The training API refuses a run its preflight says cannot work on this machine (an error finding), as the window and
the CLI do, with the engine's sentence; `"force": true` starts it anyway (the CLI's --force)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import httpx
from patching import patch_everywhere
from server_helpers import running_server

sys.path.insert(0, str(Path(__file__).parents[1] / "engine"))
from train_helpers import make_dataset

from desktop_app.engine.train import memory_plan as mp

GIB = 1 << 30


def test_a_run_preflight_says_cannot_work_is_refused_unless_forced(tmp_path, monkeypatch):
    # 1 MB free of 64 GiB: the tiny preset's weights and optimizer state exceed what is free (the preflight error),
    # not everything the machine has (the engine's hard gate), so forcing it starts a real run
    machine = mp.Machine(ram_free=1 << 20, ram_total=64 * GIB)
    patch_everywhere(monkeypatch, mp, "this_machine", lambda probe_gpu=None: machine)
    dataset = make_dataset(tmp_path / "ds")
    body = {"dataset": "ds", "preset": "tiny", "train": {"steps": 2, "batch_size": 2, "threads": 1}}
    with running_server(tmp_path / "ws") as (url, state), httpx.Client(base_url=url, timeout=60) as client:
        shutil.copytree(dataset, state.workspace.folder("datasets") / "ds")
        refused = client.post("/api/runs", json=body)
        assert refused.status_code == 422, refused.text
        message = refused.json()["error"]["message"]
        assert message.startswith("this run cannot work on this machine: Memory: this run needs about")
        assert '"force": true' in message
        assert client.get("/api/runs").json()["runs"] == []
        forced = client.post("/api/runs", json={**body, "force": True})
        assert forced.status_code == 201, forced.text
        assert any("error: Memory" in note for note in forced.json().get("notes", []))
