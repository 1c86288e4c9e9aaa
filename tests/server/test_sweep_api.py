"""POST /api/sweeps: a sweep of a run config over HTTP reaches its trials and names its best one; bad input is one
message (400, nothing created); GET lists the workspace's sweeps; stop and resume."""

from __future__ import annotations

import io
import time

import httpx
import pytest
from server_helpers import running_server

from desktop_app.engine.specs import ModelSpec

pytest.importorskip("optuna", reason="sweeps need the optional sweep extra: pip install -e .[sweep]")
TRAIN = {"steps": 8, "batch_size": 4, "eval_every": 4, "eval_batches": 1, "save_every": 4, "warmup_steps": 1,
         "sample_tokens": 0, "threads": 1, "precision": "fp32", "trackers": []}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("ws")) as (url, state), httpx.Client(base_url=url, timeout=120) as c:
        line = "the cat {} sat on the mat {} and the dog ran."
        text = "\n\n".join(" ".join(line.format(i % 7, j % 5) for j in range(i % 4 + 3))
                           for i in range(80))  # 80 documents: some held out for validation
        files = [("files", ("corpus.txt", io.BytesIO(text.encode()), "text/plain"))]
        r = c.post("/api/datasets", files=files, data={
            "name": "data", "spec": '{"vocab_size": 320, "context_length": 32, "val_fraction": 0.1}'})
        assert r.status_code == 201, r.text
        yield c, state.workspace


def _config() -> dict:
    model = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 32).to_dict()
    return {"model": model, "dataset": "data", "train": TRAIN, "seed": 3}


def _wait(client: httpx.Client, sweep_id: str, until, timeout: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = client.get(f"/api/sweeps/{sweep_id}").json()
        if until(status):
            return status
        assert time.monotonic() < deadline, status
        time.sleep(0.1)


def test_bad_sweeps_are_one_message_and_create_nothing(api):
    client, ws = api
    for body, words in (({"vary": ["lora_rank=8,16"]}, "lora_rank is not a setting of a Pretraining run"),
                        ({"vary": ["lr=1e-2..1e-4"]}, "is empty"),
                        ({"vary": ["lr=1e-4..1e-2"], "metric": "eval_reward"}, "never reports it"),
                        ({"vary": ["lr=1e-4..1e-2"], "trials": 0}, "trials must be a whole number of at least 1")):
        r = client.post("/api/sweeps", json={"config": _config(), **body})
        assert r.status_code == 400 and words in r.json()["error"]["message"], r.text
    r = client.post("/api/sweeps", json={"config": {**_config(), "dataset": "nope"}, "vary": ["lr=1e-4..1e-2"]})
    assert r.status_code == 404
    assert not (ws.root / "sweeps").exists() or not list((ws.root / "sweeps").iterdir())
    assert client.get("/api/sweeps/nope").status_code == 404


def test_a_sweep_over_http_reaches_its_trials_and_names_its_best(api):
    client, ws = api
    r = client.post("/api/sweeps", json={"name": "lr search", "config": _config(), "vary": ["lr=1e-3..3e-2:log"],
                                         "trials": 2, "pruner": "none", "sampler": "random"})
    assert r.status_code == 201, r.text
    started = r.json()
    assert started["id"] == "lr-search" and started["path"] == str(ws.root / "sweeps" / "lr-search")
    done = _wait(client, started["id"], lambda s: s["state"] in ("completed", "failed", "stopped"))
    assert done["state"] == "completed", done
    assert done["states"]["complete"] == 2 and done["best"]["number"] in (0, 1)
    assert [t["number"] for t in done["history"]] == [0, 1] and all(t["steps"] == 8 for t in done["history"])
    assert [s["id"] for s in client.get("/api/sweeps").json()["sweeps"]] == ["lr-search"]
    # more trials: resume goes on where it was
    again = client.post("/api/sweeps/lr-search/resume")
    assert again.status_code == 200, again.text
    assert _wait(client, "lr-search", lambda s: s["state"] == "completed")["states"]["complete"] == 2
    assert client.post("/api/sweeps/lr-search/stop").status_code == 409  # not running any more
