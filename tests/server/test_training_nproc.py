"""The training API's `nproc`: a run on 2 processes (torchrun, gloo, CPU) started, followed and stopped like any API
run; a bad `nproc` is refused with what to give, and nothing is created."""

from __future__ import annotations

import io
import os
import time

import httpx
import pytest
from server_helpers import running_server

from desktop_app.engine import run_folder as rf
from desktop_app.engine.train import launcher

pytestmark = [pytest.mark.skipif(os.name != "posix", reason="torchrun on POSIX"), pytest.mark.timeout(300),
              pytest.mark.slow]
TRAIN = {"steps": 4000, "batch_size": 4, "eval_every": 0, "save_every": 0, "warmup_steps": 1, "sample_tokens": 0,
         "threads": 1, "precision": "fp32"}


@pytest.fixture
def api(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    with running_server(tmp_path / "ws") as (url, state), httpx.Client(base_url=url, timeout=120) as client:
        text = " ".join(f"the cat {i % 7} sat on the mat {i % 5} and the dog ran." for i in range(400))
        files = [("files", ("corpus.txt", io.BytesIO(text.encode()), "text/plain"))]
        r = client.post("/api/datasets", files=files, data={
            "name": "data", "spec": '{"vocab_size": 320, "context_length": 32, "val_fraction": 0.1}'})
        assert r.status_code == 201, r.text
        yield client, state.workspace


def wait(client: httpx.Client, run_id: str, until, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(f"/api/runs/{run_id}").json()
        if until(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def test_a_run_on_two_processes_through_the_api_and_bad_nproc(api):
    client, ws = api
    for bad in (0, -2, 1000):
        r = client.post("/api/runs", json={"dataset": "data", "preset": "tiny", "train": TRAIN, "nproc": bad})
        assert r.status_code == 400 and "nproc must be a whole number from 1 to" in r.json()["error"]["message"]
    assert not list(ws.folder("runs").iterdir())  # nothing was created
    started = client.post("/api/runs", json={"dataset": "data", "preset": "tiny", "train": TRAIN, "nproc": 2,
                                             "name": "two"})
    assert started.status_code == 201, started.text
    rid = started.json()["id"]
    run_dir = ws.folder("runs") / rid
    running = wait(client, rid, lambda s: s["step"] >= 2)
    assert rf.read_json(run_dir / "run.json")["distributed"] == {"nproc_per_node": 2}
    assert len(launcher.worker_pids(rf.read_json(run_dir / launcher.LAUNCH_FILE)["pid"])) == 2
    assert running["metrics"]["loss"] > 0
    assert client.post(f"/api/runs/{rid}/stop").status_code == 200
    final = wait(client, rid, lambda s: s["state"] in ("stopped", "failed", "completed"))
    assert final["state"] == "stopped", final
    assert [rf.step_of(p) for p in rf.list_committed(run_dir)] == [final["step"]]
