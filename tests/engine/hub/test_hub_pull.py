"""Pulling from the local Hub with the real huggingface_hub client: progress, the files in the Hugging Face cache,
verified against the Hub's hashes; cancel, resume (only what is missing is fetched), damaged files, a queue."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Log
from desktop_app.engine.hub.download import (
    CHUNK_BYTES,
    DownloadCancelled,
    DownloadFinished,
    DownloadProgress,
    plan_pull,
    pull,
    pull_all,
)

REPO, GGUF_REPO = "tiny-org/tiny-chat", "tiny-org/tiny-chat-GGUF"
WEIGHTS = "model.safetensors"


def finished(events) -> DownloadFinished:
    done = [e for e in events if isinstance(e, DownloadFinished)]
    assert len(done) == 1, events
    return done[0]


def test_pull_fetches_the_safetensors_set_with_progress(hub_server):
    events = list(pull(REPO))
    end = finished(events)
    folder = Path(end.folder)
    assert end.verified and (folder / "config.json").is_file() and (folder / WEIGHTS).is_file()
    assert folder.parent.name == "snapshots" and folder.name == hub_server.repos[REPO].sha
    assert "README.md" not in end.files and "tokenizer.json" in end.files  # the set, not the whole repository
    total = sum(len(hub_server.repos[REPO].files[f]) for f in end.files)
    assert end.fetched == total == hub_server.fetched()
    progress = [e for e in events if isinstance(e, DownloadProgress)]
    assert progress and progress[-1].done == progress[-1].total == total
    assert all(a.done <= b.done for a, b in itertools.pairwise(progress))


def test_pulling_again_fetches_nothing(hub_server):
    list(pull(REPO))
    before = hub_server.fetched()
    end = finished(list(pull(REPO)))
    assert end.fetched == 0 and hub_server.fetched() == before and end.verified


def test_one_gguf_quantization_ends_at_its_file(hub_server):
    end = finished(list(pull(GGUF_REPO, ["*Q8_0.gguf"])))
    assert end.files == ["tiny-chat-Q8_0.gguf"] and end.folder.endswith("tiny-chat-Q8_0.gguf")
    assert Path(end.folder).read_bytes()[:4] == b"GGUF"


def test_cancel_keeps_the_partial_file_and_pulling_again_resumes(hub_server):
    hub_server.slow(1_000_000)
    controls = Controls()
    events, asked = [], []
    for event in pull(REPO, controls=controls):
        events.append((time.monotonic(), event))
        if isinstance(event, DownloadProgress) and event.done > 600_000 and event.file == WEIGHTS and not asked:
            asked.append(time.monotonic())
            controls.stop.set()
    when, cancelled = events[-1]
    assert isinstance(cancelled, DownloadCancelled) and 0 < cancelled.done < cancelled.total
    assert when - asked[0] < 1.5  # within about a second
    assert list(Path(hub_server_cache()).rglob("*.incomplete"))
    progress = [e for _, e in events if isinstance(e, DownloadProgress)]
    assert progress[-1].speed > 200_000 and progress[-1].eta_s > 0  # bytes a second, seconds left
    span = events[-1][0] - events[0][0]
    assert len(progress) <= 12 * span + 2  # about 10 a second at most
    hub_server.slow(0)
    settled(hub_server)
    first = len(hub_server.settled())
    end = finished(list(pull(REPO)))
    assert end.fetched <= cancelled.total - cancelled.done + CHUNK_BYTES
    resumed = [r for r in hub_server.requests[first:] if r.method == "GET" and r.path.endswith(WEIGHTS)]
    assert resumed and resumed[0].range.startswith("bytes=") and resumed[0].range != "bytes=0-"
    assert not list(Path(hub_server_cache()).rglob("*.incomplete"))


def test_a_server_that_ignores_the_range_still_gives_a_verified_file(hub_server):
    hub_server.slow(1_000_000)
    controls = Controls()
    for event in pull(REPO, controls=controls):
        if isinstance(event, DownloadProgress) and event.done > 600_000 and event.file == WEIGHTS:
            controls.stop.set()
    hub_server.slow(0)
    settled(hub_server)
    hub_server.ignore_ranges = True  # huggingface_hub then starts the file again (its seek and truncate)
    first = len(hub_server.settled())
    end = finished(list(pull(REPO)))
    again = [r for r in hub_server.requests[first:] if r.method == "GET" and r.path.endswith(WEIGHTS)]
    assert again[0].range and again[0].status == 200 and end.verified
    assert (Path(end.folder) / WEIGHTS).read_bytes() == hub_server.repos[REPO].files[WEIGHTS]


def settled(server, timeout: float = 10.0) -> None:
    """Wait until the server has logged the cut-off transfer (it logs a request once its body ends)."""
    deadline = time.monotonic() + timeout
    while not any(r.method == "GET" and r.path.endswith(WEIGHTS) for r in server.requests):
        assert time.monotonic() < deadline, "the cancelled transfer never ended on the server"
        time.sleep(0.05)


def hub_server_cache() -> Path:
    import os

    return Path(os.environ["HF_HUB_CACHE"])


def test_a_damaged_file_is_caught_and_deleted(hub_server):
    hub_server.tamper(REPO, WEIGHTS)
    with pytest.raises(UserError, match=r"damaged.*pull again"):
        list(pull(REPO))
    plan = plan_pull(REPO)
    assert not plan.blob(WEIGHTS).exists() and plan.have < plan.total
    hub_server.tampered.clear()
    assert finished(list(pull(REPO))).verified  # pulled again: fetched anew


def test_the_queue_goes_on_after_a_failing_pull(hub_server):
    events = list(pull_all([("tiny-org/nothing", None), (GGUF_REPO, ["*F16.gguf"])]))
    errors = [e for e in events if isinstance(e, Log)]
    assert len(errors) == 1 and "no model tiny-org/nothing" in errors[0].message
    assert finished(events).files == ["tiny-chat-F16.gguf"]
