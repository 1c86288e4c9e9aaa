"""The training REST API: upload -> dataset with verdicts, model from a preset, a run started over HTTP
reaches its final step, status / pause / resume / save / stop, download as a zip, runs of the workspace."""

from __future__ import annotations

import io
import shutil
import time
import zipfile

import httpx
import pytest
from server_helpers import running_server

TRAIN = {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_batches": 1, "save_every": 3, "warmup_steps": 1,
         "sample_tokens": 0, "threads": 1, "precision": "fp32"}


def _corpus() -> bytes:
    text = ("the cat sat on the mat and the dog ran to the park where a bird sang a song about the sun "
            "and the moon while children played with a red ball near the old tree")
    words = text.split(" ")
    docs = [" ".join(words[(i * 5 + k) % len(words)] for k in range(20 + i % 11)) + "." for i in range(80)]
    return "\n\n".join(docs).encode()


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    """(client, workspace) of a server without a served model: the training API alone."""
    with running_server(tmp_path_factory.mktemp("ws")) as (url, state), httpx.Client(base_url=url, timeout=120) as c:
        yield c, state.workspace


def _ok(response: httpx.Response, status: int = 200) -> dict:
    assert response.status_code == status, response.text
    return response.json()


def _wait(client: httpx.Client, run_id: str, until, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = _ok(client.get(f"/api/runs/{run_id}"))
        if until(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.05)


@pytest.fixture(scope="module")
def dataset(api):
    client, _ = api
    files = [("files", ("corpus.txt", io.BytesIO(_corpus()), "text/plain")),
             ("files", ("picture.txt", io.BytesIO(b"\x89PNG\r\n\x1a\n" + bytes(200)), "text/plain")),
             ("files", ("notes (v2).md", io.BytesIO(b"# notes\n\nthe cat and the dog.\n"), "text/markdown"))]
    body = _ok(client.post("/api/datasets", files=files, data={
        "name": "uploaded", "spec": '{"vocab_size": 320, "context_length": 32, "val_fraction": 0.1}'}), 201)
    return body


def test_upload_gives_per_file_verdicts(api, dataset):
    client, ws = api
    verdicts = {f["filename"]: f for f in dataset["files"]}
    assert verdicts["corpus.txt"]["verdict"] == "ok" and verdicts["corpus.txt"]["tokens"] > 0
    assert verdicts["picture.txt"]["verdict"] != "ok" and "PNG" in verdicts["picture.txt"]["reason"]
    assert verdicts["notes (v2).md"]["verdict"] == "ok"
    assert dataset["state"] == "completed" and (ws.folder("datasets") / dataset["dataset"] / "manifest.json").is_file()
    listed = _ok(client.get("/api/datasets"))["datasets"]
    assert [d["name"] for d in listed] == [dataset["dataset"]] and listed[0]["context_length"] == 32
    # Nothing usable: 422 with the verdicts, and no dataset is left behind.
    bad = client.post("/api/datasets", files=[("files", ("x.txt", io.BytesIO(b"\x7fELF" + bytes(99)), "text/plain"))])
    assert bad.status_code == 422 and bad.json()["files"][0]["verdict"] != "ok"
    assert len(_ok(client.get("/api/datasets"))["datasets"]) == 1


def test_run_over_http_reaches_its_final_step_and_downloads(api, dataset):
    client, ws = api
    created = _ok(client.post("/api/models", json={"name": "my tiny", "preset": "tiny"}), 201)
    assert created["kind"] == "spec" and created["parameters"] > 0
    assert client.post("/api/models", json={"name": "my tiny", "preset": "tiny"}).status_code == 409
    started = _ok(client.post("/api/runs", json={"dataset": dataset["dataset"], "model": created["name"],
                                                 "train": TRAIN, "name": "api-run"}), 201)
    assert any("vocab_size" in n for n in started["notes"])
    final = _wait(client, started["id"], lambda s: s["state"] not in ("starting", "running"))
    assert final["state"] == "completed", final
    assert final["step"] == final["total_steps"] == TRAIN["steps"]
    assert final["metrics"]["loss"] > 0 and final["last_checkpoint"] and final["eta_s"] == 0
    assert started["id"] in [r["id"] for r in _ok(client.get("/api/runs"))["runs"]]
    assert (ws.folder("runs") / started["id"] / "run.json").is_file()  # the window's Library sees it
    models = {m["name"]: m for m in _ok(client.get("/api/models"))["models"]}
    assert models[started["id"]]["downloadable"] and not models[created["name"]]["downloadable"]
    response = client.get(f"/api/models/{started['id']}/download")
    assert response.status_code == 200 and response.headers["content-type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(response.content)).namelist()
    assert any(n.endswith("/config.json") for n in names) and any(n.endswith("model.safetensors") for n in names)
    deadline = time.monotonic() + 10  # the temporary export is removed once the file has been sent
    while [p for p in ws.folder("exports").iterdir() if p.name.startswith(".download-")]:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    # A run the window (or CLI) made in the same workspace shows up with its state read from disk.
    shutil.copytree(ws.folder("runs") / started["id"], ws.folder("runs") / "from-window")
    other = _ok(client.get("/api/runs/from-window"))
    assert other["state"] == "completed" and other["step"] == TRAIN["steps"] and other["started_by"] == "other"
    assert client.post("/api/runs/from-window/resume").status_code == 409  # complete: nothing to resume
    # One that is still training there (no final event, metrics written just now) is not resumed here too.
    metrics = ws.folder("runs") / "from-window" / "metrics.jsonl"
    lines = [line for line in metrics.read_text().splitlines() if '"finished"' not in line]
    metrics.write_text("\n".join(lines) + "\n")
    busy = client.post("/api/runs/from-window/resume")
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "run_busy"


def test_pause_resume_save_stop(api, dataset):
    client, _ = api
    long = {**TRAIN, "steps": 100_000, "save_every": 0, "eval_every": 0}
    run = _ok(client.post("/api/runs", json={"dataset": dataset["dataset"], "preset": "tiny", "train": long}), 201)
    rid = run["id"]
    _wait(client, rid, lambda s: s["step"] >= 2)
    _ok(client.post(f"/api/runs/{rid}/pause"))
    paused = _wait(client, rid, lambda s: s["state"] == "paused")
    time.sleep(0.3)
    assert _ok(client.get(f"/api/runs/{rid}"))["step"] == paused["step"]  # no progress while paused
    assert _ok(client.post(f"/api/runs/{rid}/resume"))["state"] == "running"
    _wait(client, rid, lambda s: s["step"] > paused["step"])
    _ok(client.post(f"/api/runs/{rid}/save"))
    _wait(client, rid, lambda s: s["last_checkpoint"] is not None)
    assert _ok(client.post(f"/api/runs/{rid}/stop"))["state"] in ("stopping", "stopped")
    stopped = _wait(client, rid, lambda s: s["state"] not in ("running", "stopping", "paused"))
    assert stopped["state"] == "stopped" and 2 <= stopped["step"] < long["steps"]
    assert client.post(f"/api/runs/{rid}/stop").status_code == 409  # not training any more
    # resume on a stopped run continues it from its checkpoint
    resumed = _ok(client.post(f"/api/runs/{rid}/resume"))
    assert resumed["state"] in ("starting", "running")
    _ok(client.post(f"/api/runs/{rid}/stop"))
    _wait(client, rid, lambda s: s["state"] == "stopped")


def test_run_request_errors(api, dataset):
    client, _ = api
    assert client.post("/api/runs", json={"dataset": "nope", "preset": "tiny"}).status_code == 404
    assert client.post("/api/runs", json={"dataset": "/etc", "preset": "tiny"}).status_code == 400
    assert client.post("/api/runs", json={"dataset": dataset["dataset"]}).status_code == 400  # no model
    r = client.post("/api/runs", json={"dataset": dataset["dataset"], "preset": "tiny", "train": {"stepz": 3}})
    assert r.status_code == 400 and "stepz" in r.json()["error"]["message"]
    assert client.post("/api/runs", json={"dataset": dataset["dataset"], "preset": "nope"}).status_code == 400
    assert client.get("/api/runs/does-not-exist").status_code == 404
    assert client.post("/api/runs/does-not-exist/stop").status_code == 404
    assert client.get("/api/models/../../etc/download").status_code == 404
    assert client.post("/api/models", json={"name": "x", "preset": "tiny", "spec": {}}).status_code == 400
