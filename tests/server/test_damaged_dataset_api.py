"""The server's run API on a prepared dataset damaged after prepare (issue 41): the start is refused with the
engine's one line naming the file (HTTP 400, no traceback, never "a bug"); restored, the run starts."""

from __future__ import annotations

import io
import os

import httpx
import pytest
from server_helpers import running_server

TRAIN = {"steps": 2, "batch_size": 4, "eval_every": 0, "save_every": 0, "warmup_steps": 1, "sample_tokens": 0,
         "threads": 1, "precision": "fp32"}


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws")
    with running_server(root) as (url, _), httpx.Client(base_url=url, timeout=120) as client:
        yield client, root


def test_truncated_train_bin_is_refused_naming_it(api):
    client, root = api
    docs = [" ".join(f"word{(i * 7 + k) % 50}" for k in range(30)) + "." for i in range(80)]
    files = [("files", ("corpus.txt", io.BytesIO("\n\n".join(docs).encode()), "text/plain"))]
    made = client.post("/api/datasets", files=files, data={
        "name": "damaged", "spec": '{"vocab_size": 320, "context_length": 32, "val_fraction": 0.1}'})
    assert made.status_code == 201, made.text
    train_bin = next(root.rglob("damaged/train.bin"))
    whole = train_bin.read_bytes()
    os.truncate(train_bin, len(whole) // 2 | 1)
    refused = client.post("/api/runs", json={"dataset": made.json()["dataset"], "preset": "tiny", "train": TRAIN})
    assert refused.status_code == 400, refused.text
    text = refused.text
    assert str(train_bin) in text and "cut short" in text and "bug" not in text and "Traceback" not in text
    train_bin.write_bytes(whole)  # restored: the same request starts
    started = client.post("/api/runs", json={"dataset": made.json()["dataset"], "preset": "tiny", "train": TRAIN})
    assert started.status_code == 201, started.text
